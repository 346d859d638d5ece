"""Build the SparkSession the writer runs in.

Locally (``local[N]`` masters) the Kafka, Avro and Delta connector jars come through
``spark.jars`` from :mod:`lakehouse_writer.jars` (resolved by Maven on the first run, then
cached; no checkout of this repository needed); on a cluster (Databricks, Fabric,
spark-submit) they are expected on the cluster already and ``jars=None`` leaves ``spark.jars``
alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Sized for a small machine: `local[2]` with Spark's default 200 shuffle partitions spends most
# of a micro-batch scheduling empty tasks.
_LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",  # change times are UTC instants; show them as such
    "spark.driver.memory": "3g",
    "spark.sql.adaptive.enabled": "true",
    # The writer caches each micro-batch once (its decoded rows). Compressing the cache costs
    # more CPU than it saves here: building the cache of 1M TPC-H lineitem rows took 3.4 s
    # over the read and decode compressed, 1.5 s not (bench/writer.py's table, 2 cores).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
}
_DELTA = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def build_spark_session(
    app_name: str = "lakehouse-writer",
    master: str | None = "local[2]",
    jars: Sequence[str] | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession with Delta Lake, Kafka and Avro support.

    Args:
        app_name: Spark application name.
        master: ``local[N]`` to run in-process; None to take the master from the environment.
        jars: Connector jars for ``spark.jars``. None with a local master resolves them with
            Maven (:func:`lakehouse_writer.jars.spark_jars`); pass ``[]`` when the cluster
            provides them.
        conf: Extra Spark settings; they win over the defaults here.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    settings = dict(_DELTA)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            settings.update(_LOCAL_DEFAULTS)
            if jars is None:
                from lakehouse_writer.jars import spark_jars

                jars = spark_jars()
    if jars:
        settings["spark.jars"] = ",".join(jars)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
