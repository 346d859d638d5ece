"""Build the SparkSession the writer runs in.

The master comes from, in this order: ``--master``; a session or ``spark-submit`` already
running (its ``--master``); ``SPARK_MASTER``; ``spark.master`` in ``spark-defaults.conf``;
else ``local[2]`` (:func:`resolve_master`). With a ``local[N]`` master set here the writer's
small-machine defaults apply. Whenever the writer starts the driver itself (a master set here:
``local[N]``, or a cluster's, ``--master spark://HOST:PORT``, ``yarn``, ``k8s://...``) the
Kafka, Avro and Delta connector jars come through ``spark.jars``
(:func:`lakehouse_writer.runtime.jars.local_jars`: ``--jars``, none when the driver's classpath has
them already, ``LAKEHOUSE_JARS_DIR``, or Maven as the last resort); with a cluster master
Spark ships them from the driver to the executors. Jars and packages the user names in
``conf`` (``spark.jars``, ``spark.jars.packages``) are added to those, not put in their place;
a connector the user names replaces the writer's of the same artifact
(:func:`user_jars_settings`). A local master also gets a local file system that
starts no process per call (:mod:`lakehouse_writer.runtime.local_fs`). Under ``spark-submit``,
Databricks or Fabric (no master set here) the jars are expected where the cluster has them
(``spark-submit --jars``), and :func:`missing_connectors` names any that are not.

The writer needs a classic session (py4j): it calls Delta's and Hadoop's JVM classes.
Spark Connect sessions are refused at start (:func:`refuse_spark_connect`,
:func:`require_classic`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.runtime.jars import (
    CONNECTOR_CLASSES,
    JARS_DIR_VARIABLE,
    artifact_name,
    local_jars,
)
from lakehouse_writer.runtime.lines import current_line
from lakehouse_writer.runtime.local_fs import local_fs_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "ConnectorsMissing",
    "SparkConnectUnsupported",
    "build_spark_session",
    "check_connectors",
    "missing_connectors",
    "refuse_spark_connect",
    "require_classic",
    "resolve_master",
    "user_jars_settings",
]

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"  # when nothing else names one: the writer on one small machine
# Variables that make pyspark's builder return a Spark Connect session.
_CONNECT_VARIABLES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")

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
    # Delta's VACUUM lists a table in a job of this many tasks, 10,000 by default: 31-45 s for a
    # table of five files on local[2], 2.7-3.7 s with 2 (`maintain` sets it per call on clusters).
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
}
_DELTA = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


class SparkConnectUnsupported(LakehouseWriterError):
    """The session is (or would be) a Spark Connect session; the writer needs a classic one."""


class ConnectorsMissing(LakehouseWriterError):
    """The session lacks the Kafka, Avro or Delta classes the writer needs."""


def build_spark_session(
    app_name: str = "lakehouse-writer",
    master: str | None = DEFAULT_MASTER,
    jars: Sequence[str] | None = None,
    conf: Mapping[str, str] | None = None,
    ui: bool = False,
) -> SparkSession:
    """Return a classic SparkSession with Delta Lake, Kafka and Avro support.

    Args:
        app_name: Spark application name.
        master: ``local[N]`` to run in-process, or a cluster's master (``spark://HOST:PORT``,
            ``yarn``) with the driver in this process; None to take the master from the
            environment (``spark-submit``, a running session, ``spark-defaults.conf``).
        jars: Connector jars for ``spark.jars``. None with a master finds them
            (:func:`lakehouse_writer.runtime.jars.local_jars`; a cluster gets them from the driver);
            pass ``[]`` when the cluster provides them.
        conf: Extra Spark settings; they win over the defaults here.
        ui: Serve Spark's web UI (a long-lived writer: its jobs, stages and streaming query
            can be watched); a local master leaves it off otherwise.

    Raises:
        SparkConnectUnsupported: Spark Connect is asked for (``SPARK_REMOTE``, ``spark.remote``).
    """
    from pyspark.sql import SparkSession

    refuse_spark_connect(conf)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
        if jars is None:
            jars = _driver_jars(conf or {})
    for key, value in session_settings(master, jars, conf, ui).items():
        builder = builder.config(key, value)
    return require_classic(builder.getOrCreate())


def session_settings(
    master: str | None,
    jars: Sequence[str] | None = None,
    conf: Mapping[str, str] | None = None,
    ui: bool = False,
) -> dict[str, str]:
    """The settings :func:`build_spark_session` gives its session.

    Delta's; a local master's small-machine defaults; the jars; the UI when asked for; then
    ``conf`` over them all; last, for a local master, the local file system of
    :mod:`lakehouse_writer.runtime.local_fs` unless ``conf`` names one.
    """
    settings = dict(_DELTA)
    if master is not None and master.startswith("local"):
        settings.update(_LOCAL_DEFAULTS)
    if ui:
        settings["spark.ui.enabled"] = "true"
    settings.update(conf or {})
    settings.update(user_jars_settings(jars or [], conf or {}))
    if master is not None and master.startswith("local"):
        settings.update(local_fs_settings(settings))
    return settings


def _driver_jars(conf: Mapping[str, str]) -> list[str]:
    """The connector jars a driver started here needs in ``spark.jars`` (maybe none).

    None when the jars and packages ``conf`` names hold every connector of the running line;
    else :func:`lakehouse_writer.runtime.jars.local_jars` (none when the driver's classpath has
    them).
    """
    named = _artifacts_named(conf)
    if all(a in named for a in current_line().connector_artifacts):
        return []
    return local_jars(class_path=conf.get("spark.driver.extraClassPath", ""))


def user_jars_settings(ours: Sequence[str], conf: Mapping[str, str]) -> dict[str, str]:
    """``spark.jars``: the writer's jars with the user's (``conf``) added, not replaced.

    A jar of ours whose artifact the user names (a jar file in ``spark.jars``, a coordinate in
    ``spark.jars.packages``, which Ivy resolves and adds) is left out: two versions of one
    artifact on a classpath clash, and the user's choice wins. {} when there is nothing to set.
    """
    theirs = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    named = _artifacts_named(conf)
    kept = [j for j in ours if artifact_name(Path(j).name) not in named]
    merged = list(dict.fromkeys([*kept, *theirs]))
    return {"spark.jars": ",".join(merged)} if merged else {}


def _artifacts_named(conf: Mapping[str, str]) -> set[str]:
    """Artifact names of the jars (``spark.jars``) and packages ``conf`` names."""
    files = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    packages = [p for p in conf.get("spark.jars.packages", "").split(",") if p.count(":") >= 2]
    return {artifact_name(Path(f.strip()).name) for f in files} | {
        p.strip().split(":")[1] for p in packages
    }


def resolve_master(
    given: str | None, environ: Mapping[str, str] | None = None, configured: str | None = None
) -> str | None:
    """The master the writer asks for; None leaves it to Spark (``spark-submit`` gave one).

    Args:
        given: ``--master``; ``"env"`` (the old spelling) or None when not given.
        environ: The environment; None for ``os.environ``.
        configured: ``SPARK_MASTER`` (:attr:`LakehouseSettings.spark_master
            <lakehouse_writer.settings.LakehouseSettings.spark_master>`).

    Returns:
        ``given``; None under ``spark-submit``, in a process with a running SparkContext or
        with ``spark.master`` in ``spark-defaults.conf``; ``configured``; else
        :data:`DEFAULT_MASTER`.
    """
    env = os.environ if environ is None else environ
    if given and given != "env":
        return given
    if given == "env" or _master_given_elsewhere(env):
        return None
    return configured or DEFAULT_MASTER


def _master_given_elsewhere(env: Mapping[str, str]) -> bool:
    """True under ``spark-submit``/a running session, or with ``spark.master`` configured."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None or env.get("PYSPARK_GATEWAY_PORT"):
        return True  # spark-submit starts the JVM first and passes its port
    conf_dir = env.get("SPARK_CONF_DIR") or (
        str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else ""
    )
    defaults = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    if defaults is None or not defaults.is_file():
        return False
    lines = (line.split(None, 1) for line in defaults.read_text().splitlines())
    return any(parts and parts[0] == "spark.master" for parts in lines)


def refuse_spark_connect(
    conf: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> None:
    """Raise before Spark starts when the session would be a Spark Connect one.

    Raises:
        SparkConnectUnsupported: ``SPARK_REMOTE`` or ``SPARK_CONNECT_MODE_ENABLED`` is set,
            or ``conf`` has ``spark.remote``; the message names it, never its value (a
            Connect URL may carry a token).
    """
    env = os.environ if environ is None else environ
    named = [v for v in _CONNECT_VARIABLES if env.get(v)]
    named += ["spark.remote"] if "spark.remote" in (conf or {}) else []
    if named:
        raise SparkConnectUnsupported(
            f"{' and '.join(named)} asks for a Spark Connect session; the lakehouse writer "
            "needs a classic session (it calls Delta's and Hadoop's JVM classes). Unset it, "
            "or run the writer as a job: spark-submit, a Databricks job cluster in dedicated "
            "(single user) access mode, or --master"
        )


def require_classic(spark: Any) -> SparkSession:
    """``spark`` if it is a classic session.

    Raises:
        SparkConnectUnsupported: It is a ``pyspark.sql.connect.session.SparkSession``.
    """
    kind = type(spark)
    if kind.__module__.startswith("pyspark.sql.connect"):
        raise SparkConnectUnsupported(
            f"the session is a Spark Connect session ({kind.__module__}.{kind.__name__}); "
            "the lakehouse writer needs a classic session (it calls Delta's and Hadoop's JVM "
            "classes). Run it as a job: spark-submit, a Databricks job cluster in dedicated "
            "(single user) access mode, or --master"
        )
    return spark  # type: ignore[no-any-return]


def missing_connectors(spark: SparkSession) -> list[str]:
    """The connectors (Kafka source, Avro, Delta) whose classes the driver cannot load."""
    jvm: Any = spark._jvm
    utils = jvm.org.apache.spark.util.Utils
    return [name for name, cls in CONNECTOR_CLASSES.items() if not utils.classIsLoadable(cls)]


def check_connectors(spark: SparkSession) -> None:
    """Raise unless the session has every connector class.

    Raises:
        ConnectorsMissing: Names the missing ones and how to give them.
    """
    missing = missing_connectors(spark)
    if missing:
        raise ConnectorsMissing(
            f"the Spark session lacks {', '.join(missing)}. Give the jars: spark-submit "
            "--jars or --packages, lakehouse-writer run --jars a.jar,b.jar, a folder of them "
            f"in {JARS_DIR_VARIABLE}, or the cluster's libraries",
            master=spark.sparkContext.master,
        )


def quote_name(name: str) -> str:
    """A Spark SQL identifier: ``name`` in backticks (a table path, a column)."""
    return "`" + name.replace("`", "``") + "`"


@contextmanager
def session_conf(spark: SparkSession, key: str, value: str | None) -> Iterator[None]:
    """Set a session setting for the block, then put the old value back (None: leave it)."""
    if value is None:
        yield
        return
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)
