"""The Lakehouse Writer: a Spark Structured Streaming job that applies change rows to Delta.

Quickstart::

    lakehouse-writer run --lakehouse /data/lake --checkpoint /data/ckpt --once

    from lakehouse_writer import LakehouseSettings, run
    from lakehouse_writer.runtime.session import build_spark_session
    spark = build_spark_session()   # local[2]; connector jars from lakehouse_writer.runtime.jars
    run(spark, LakehouseSettings(lakehouse_path="/data/lake", checkpoint_path="/data/ckpt"),
        once=True)

The folders follow a batch: ``stream/`` starts the query and holds the batch as its steps
(:mod:`~lakehouse_writer.stream.batch` is the page to read first); ``read/`` (Kafka → decoded
rows) → ``route/`` (which engine applies a table) → ``engines/`` (Spark's Delta, and delta-rs
in the driver, following one set of rules: ``rules/``) → ``tables/`` (create, evolve,
maintain) → ``commit/`` (exactly once: the state, ``_commits``, the system tables); ``ops/``
is what an operator sees, ``runtime/`` where the writer runs. :func:`apply_batch` applies a
table's decoded rows with Spark.
"""

from lakehouse_writer.engines.base import ApplyResult
from lakehouse_writer.engines.spark.engine import apply_batch
from lakehouse_writer.errors import (
    ApplyError,
    DecodeError,
    LakehouseWriterError,
    SchemaEvolutionError,
)
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream.batch import BatchProcessor
from lakehouse_writer.stream.job import run
from lakehouse_writer.tables.manager import TableInfo, TableManager, TableRef
from producer_lib._version import installed_version

__version__ = installed_version()  # one distribution, flow-platform: producer_lib's version

__all__ = [
    "ApplyError",
    "ApplyResult",
    "BatchProcessor",
    "DecodeError",
    "LakehouseSettings",
    "LakehouseWriterError",
    "SchemaEvolutionError",
    "TableInfo",
    "TableManager",
    "TableRef",
    "apply_batch",
    "run",
]
