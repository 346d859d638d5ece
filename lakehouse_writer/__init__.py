"""The Lakehouse Writer: a Spark Structured Streaming job that applies change rows to Delta.

Quickstart::

    lakehouse-writer run --lakehouse /data/lake --checkpoint /data/ckpt --once

    from lakehouse_writer import LakehouseSettings, run
    from lakehouse_writer.runtime.session import build_spark_session
    spark = build_spark_session()   # local[2]; connector jars from lakehouse_writer.runtime.jars
    run(spark, LakehouseSettings(lakehouse_path="/data/lake", checkpoint_path="/data/ckpt"),
        once=True)

The data path: :mod:`~lakehouse_writer.read.decode` (Kafka → decoded rows) →
:mod:`~lakehouse_writer.engines.spark.apply` (row types → Delta, :func:`apply_batch`) →
:mod:`~lakehouse_writer.tables.manager` (create/evolve Delta tables); :mod:`~lakehouse_writer.job`
runs the query; :mod:`~lakehouse_writer.commit.system_tables` keeps ``_rejected``,
``_execution_log`` and ``_lineage``, :mod:`~lakehouse_writer.commit.commits` the ``_commits`` rows
(held back until every row of a commit is applied), :mod:`~lakehouse_writer.commit.state` the
writer's progress (``_writer_state``: what a restart must not forget).
"""

from lakehouse_writer.engines.spark.apply import ApplyResult, apply_batch
from lakehouse_writer.errors import (
    ApplyError,
    DecodeError,
    LakehouseWriterError,
    SchemaEvolutionError,
)
from lakehouse_writer.job import BatchProcessor, run
from lakehouse_writer.settings import LakehouseSettings
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
