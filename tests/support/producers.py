"""A KafkaProducer as the producer tests use it: source SHOPDB, a fresh function name."""

from __future__ import annotations

import logging
import os
import uuid

import duckdb

from producer_lib.kafka import KafkaProducer
from producer_lib.kafka._encode_process import EncoderProcess
from producer_lib.schema import AvroLong, AvroString, ValueSchema
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


ENCODINGS = ("thread", "process")  # parametrize export tests over both ways of encoding


def encode_after_rows(encoding: str) -> int:
    """``encode_process_after_rows`` of exports that encode in the flow's thread or the process.

    For ``"process"`` the process-wide encoder is started and waited for, so even a one-batch
    export goes through it (a running encoder is used from an export's first batch).
    """
    if encoding == "thread":
        return -1
    encoder = EncoderProcess.shared()
    while not encoder.ready():
        assert encoder.alive, "the encoder process exited while starting"
        os.sched_yield()
    return 0


def encoding_settings(bootstrap: str, encoding: str) -> KafkaSettings:
    """Settings whose exports encode as ``encoding`` says (see :func:`encode_after_rows`)."""
    return KafkaSettings(
        bootstrap_servers=bootstrap, encode_process_after_rows=encode_after_rows(encoding)
    )


def notes_schema() -> ValueSchema:
    """SHOP.NOTES: ``ID`` (primary key) and ``TEXT``, the table of the export error tests."""
    schema = ValueSchema("NOTES", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("TEXT", AvroString())
    schema.add_primary_key("ID")
    return schema
