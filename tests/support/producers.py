"""A KafkaProducer as the producer tests use it: source SHOPDB, a fresh function name."""

from __future__ import annotations

import logging
import uuid

import duckdb

from producer_lib.kafka import KafkaProducer
from producer_lib.settings import KafkaSettings

log = logging.getLogger("test")


def shop_producer(
    kafka: str | KafkaSettings, con: duckdb.DuckDBPyConnection | None = None
) -> KafkaProducer:
    """A producer of source system SHOPDB (dataflow ``bronze``) with a fresh function name.

    Args:
        kafka: A bootstrap address, or the settings to use (security, overrides).
        con: The DuckDB connection it reads from (None: DuckDB's default one).
    """
    settings = KafkaSettings(bootstrap_servers=kafka) if isinstance(kafka, str) else kafka
    return KafkaProducer(
        "SHOPDB",
        f"fn_{uuid.uuid4().hex[:8]}",
        "bronze",
        "test",
        settings,
        log,
        duckdb_connection=con,
    )
