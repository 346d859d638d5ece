"""Command line: ``lakehouse-writer run --lakehouse PATH --checkpoint PATH [--once] ...``.

``status`` and ``resume-table NAMESPACE.NAME`` (same ``--lakehouse``/``--checkpoint``) are the
operator's commands (:mod:`lakehouse_writer.ops.admin`, docs/OPERATIONS.md); ``maintain
[--table NAMESPACE.NAME ...] [--dry-run]`` compacts, vacuums and checkpoints the tables
(:mod:`lakehouse_writer.tables.maintain`); ``replay-rejected [--table NAMESPACE.NAME]
[--since ISO_TIME] [--dry-run]`` applies the rejected rows whose cause is fixed
(:mod:`lakehouse_writer.ops.replay`); ``rebuild --table NAMESPACE.NAME [--dry-run]``
recreates a table from its topics (:mod:`lakehouse_writer.ops.rebuild`); ``ui [--host H]
[--port P]`` serves the status page (:mod:`lakehouse_writer.ops.ui`). ``run`` serves
metrics and commits to a monitoring consumer group as ``LAKEHOUSE_METRICS_PORT`` and
``LAKEHOUSE_MONITOR_GROUP`` say (:mod:`lakehouse_writer.ops.watch`).

SIGTERM or SIGINT stop the writer after the batch it is applying (exit code 0, status file
state ``stopped``). A failed run exits with 1: the status file says ``failed`` with the root
cause, the last line on stderr names it, and ``writer_error.log`` in the checkpoint holds
the whole trace. Kafka is asked first whether it answers within ``--connect-timeout``.

:func:`main` is the console script (it returns the exit code); :func:`run_command` is the
same command for callers that read exceptions, not exit codes (a Databricks
``python_wheel_task``): it raises on failure.

The Spark master is ``--master``, else the one ``spark-submit`` or a running session has,
else ``SPARK_MASTER``, else ``spark.master`` of ``spark-defaults.conf``, else ``local[2]``
(:func:`lakehouse_writer.runtime.session.resolve_master`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from producer_lib._version import installed_version
from producer_lib.errors import ConfigError
from producer_lib.logs import configure_logging, say_error
from producer_lib.settings import LogSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["jvm_logging", "main", "run_command"]

log = logging.getLogger(__name__)
_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


_DESCRIPTION = """\
Apply the change rows that flows publish to Kafka to Delta Lake tables, exactly once.

Tables land at <lakehouse>/<namespace>/<table>; rows that cannot be decoded or applied land
in the table _rejected. Kafka is reached with the flows' settings (KAFKA_BOOTSTRAP_SERVERS,
KAFKA_SECURITY_PROTOCOL, ...); every variable is listed in docs/ENVIRONMENT.md.
"""
_EPILOG = """\
examples:
  lakehouse-writer run --lakehouse ./lake --checkpoint ./ckpt --once
  lakehouse-writer run --lakehouse /data/lake --checkpoint /data/ckpt --trigger-interval 5
  lakehouse-writer status --lakehouse ./lake --checkpoint ./ckpt
  lakehouse-writer resume-table SHOP.ORDERS --lakehouse ./lake --checkpoint ./ckpt
  lakehouse-writer maintain --lakehouse ./lake --dry-run
  lakehouse-writer replay-rejected --lakehouse ./lake --checkpoint ./ckpt --dry-run
  lakehouse-writer ui --lakehouse ./lake --checkpoint ./ckpt --port 8790

Logs go to stderr: LOG_FORMAT=json for one JSON object a line, LOG_LEVEL=DEBUG for more.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakehouse-writer",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    where, spark = _where_arguments(), _spark_arguments()
    run = sub.add_parser(
        "run",
        parents=[where, spark],
        help="apply the change rows of Kafka topics to Delta tables",
        description="Read the topics (read_committed) and apply their rows to Delta tables, "
        "continuously or, with --once, until what is there now is applied. SIGTERM or Ctrl-C "
        "stop it after the current batch. Exit code 0: stopped or drained, 1: failed (the "
        "last line names the cause), 2: a bad setting.",
    )
    run.add_argument(
        "--topics",
        metavar="REGEX",
        help="Java regex of the whole topic names to read (LAKEHOUSE_TOPICS_REGEX; default: "
        "every topic not starting with _)",
    )
    run.add_argument("--once", action="store_true", help="apply what is there now, then exit")
    run.add_argument(
        "--trigger-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between batches (LAKEHOUSE_TRIGGER_INTERVAL_S, 10)",
    )
    run.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        metavar="N",
        help="at most N messages a batch (LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER; default: all)",
    )
    run.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT", help="Kafka (KAFKA_BOOTSTRAP_SERVERS)"
    )
    run.add_argument(
        "--connect-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds Kafka has to answer at start (LAKEHOUSE_CONNECT_TIMEOUT_S, 30)",
    )
    status = sub.add_parser(
        "status",
        parents=[where, spark],
        help="print the writer's state, last batch, lag and stopped tables",
        description="Print the state of the writer of this checkpoint: its last batch, the "
        "lag per topic, stopped tables and its monitoring group. Exit code 0: healthy, 1: "
        "failed, a table stopped or silent while running, 3: no status yet.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON document")
    resume = sub.add_parser(
        "resume-table",
        parents=[where, spark],
        help="resume a table stopped by a schema error (with the writer stopped)",
        description="Resume a table the writer stopped (its schema changed incompatibly) "
        "once the cause is fixed; the next run applies its rows again. Stop the writer first.",
    )
    resume.add_argument("table", metavar="NAMESPACE.NAME", help="the table, e.g. SHOP.ORDERS")
    resume.add_argument(
        "--force", action="store_true", help="even though the status file says 'running'"
    )
    maintain = sub.add_parser(
        "maintain",
        parents=[where, spark],
        help="compact, VACUUM by retention and checkpoint the Delta tables",
        description="Compact small files, VACUUM old files by each table's retention (and "
        "GDPR deletes within LAKEHOUSE_GDPR_COMPLETION_HOURS) and checkpoint the Delta logs. "
        "Beside a running writer set LAKEHOUSE_MAINTAIN_INTERVAL_S instead (docs/OPERATIONS.md).",
    )
    maintain.add_argument(
        "--table",
        action="append",
        metavar="NAMESPACE.NAME",
        help="only this table (repeatable; default: every table of the lakehouse)",
    )
    maintain.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _replay_parser(sub, [where, spark])
    _rebuild_parser(sub, [where, spark])
    _ui_parser(sub, [where, spark])
    return parser


def _replay_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    replay = sub.add_parser(
        "replay-rejected",
        parents=parents,
        help="apply the rows of _rejected whose cause is fixed, exactly once",
        description="Apply the rows of _rejected that can be applied now (their schema was "
        "published, the table takes them), in their order and with their change times, "
        "exactly once even if killed and run again; they are marked in _replayed. Rows that "
        "still fail stay in _rejected with the new reason. Stop the writer first. Exit code "
        "0: done (rows may still fail: the summary says), 1: refused or failed, 2: bad "
        "arguments or settings.",
    )
    replay.add_argument("--table", metavar="NAMESPACE.NAME", help="only this table's rows")
    replay.add_argument(
        "--since", type=_since, metavar="ISO_TIME", help="only rows rejected since then"
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="print what would be applied, change nothing"
    )
    replay.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka, for the schemas topic (KAFKA_BOOTSTRAP_SERVERS)",
    )


def _rebuild_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    rebuild = sub.add_parser(
        "rebuild",
        parents=parents,
        help="recreate one table from its topics' retained offsets, exactly once",
        description="Read the table's rows again from the earliest offsets its topics retain "
        "up to where the writer stands, apply them into a side table through the writer's "
        "decode and rules, and swap them in with one Delta commit. Refuses, naming topic, "
        "partition and offsets, when the topics lost part of the table's history since its "
        "last TRUNCATE. Stop the writer first. Exit code 0: done, 1: refused or failed, 2: "
        "bad arguments or settings.",
    )
    rebuild.add_argument("--table", required=True, metavar="NAMESPACE.NAME", help="the table")
    rebuild.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    rebuild.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka (KAFKA_BOOTSTRAP_SERVERS)",
    )


def _since(text: str) -> Any:
    from lakehouse_writer.ops.replay import parse_since

    try:
        return parse_since(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ui_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    from lakehouse_writer.ops.ui.command import DEFAULT_PORT

    ui = sub.add_parser(
        "ui",
        parents=parents,
        help="serve the status page: tables, lag, throughput, runs, rejected rows",
        description="Serve a page that shows the writer of this checkpoint and its tables and "
        "refreshes by itself; it works whether the writer runs or not. It needs the "
        "credentials producer-lib serve takes (FLOW_AUTH_*, function name lakehouse-writer; "
        "open it as http://HOST:PORT/?code=KEY); without any it serves on loopback only. "
        "Exit code 0: stopped by SIGTERM or Ctrl-C, 1: cannot listen, 2: a bad setting.",
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ui.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on ({DEFAULT_PORT})"
    )
    ui.add_argument(
        "--insecure",
        action="store_true",
        help="serve without authentication beyond loopback (development only)",
    )
    ui.add_argument(
        "--refresh",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often the page refreshes itself (5)",
    )


def _where_arguments() -> argparse.ArgumentParser:
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--lakehouse",
        metavar="PATH",
        help="folder or URI of the Delta tables; relative paths work (LAKEHOUSE_PATH)",
    )
    where.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="folder or URI of the writer's checkpoint (LAKEHOUSE_CHECKPOINT_PATH)",
    )
    return where


def _spark_arguments() -> argparse.ArgumentParser:
    spark = argparse.ArgumentParser(add_help=False)
    spark.add_argument(
        "--master",
        help="Spark master (default: spark-submit's, SPARK_MASTER, spark-defaults.conf, "
        "else local[2])",
    )
    spark.add_argument(
        "--conf",
        action="append",
        type=_conf_pair,
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. --conf spark.executor.memory=4g",
    )
    spark.add_argument(
        "--jars",
        type=_jar_list,
        help="comma-separated connector jars (Kafka, Avro, Delta) for spark.jars; with a "
        "local master they spare the Maven resolution",
    )
    return spark


def _conf_pair(text: str) -> tuple[str, str]:
    """``"k=v"`` -> ``("k", "v")``; the text is not echoed (a value may be a secret)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("--conf takes KEY=VALUE (a Spark setting)")
    return key.strip(), value


def _jar_list(text: str) -> list[str]:
    """``"a.jar,b.jar"`` -> ``["a.jar", "b.jar"]``."""
    return [jar.strip() for jar in text.split(",") if jar.strip()]


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {
        "LAKEHOUSE_PATH": args.lakehouse,
        "LAKEHOUSE_CHECKPOINT_PATH": args.checkpoint,
        "LAKEHOUSE_TOPICS_REGEX": getattr(args, "topics", None),
        "LAKEHOUSE_TRIGGER_INTERVAL_S": getattr(args, "trigger_interval", None),
        "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": getattr(args, "max_offsets_per_trigger", None),
        "KAFKA_BOOTSTRAP_SERVERS": getattr(args, "bootstrap_servers", None),
        "LAKEHOUSE_CONNECT_TIMEOUT_S": getattr(args, "connect_timeout", None),
    }
    return {k: v for k, v in pairs.items() if v is not None}


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``lakehouse-writer`` command; returns the process exit code.

    ``run``: 1 failed, 2 bad settings. ``status``: 0 healthy, 1 failed or a table stopped,
    2 bad settings, 3 no status yet. ``resume-table``: 0 resumed, 1 refused, 2 bad settings.
    ``maintain``: 0 every table done, 1 a table failed (named), 2 bad settings.
    ``replay-rejected`` and ``rebuild``: 0 done, 1 refused or failed, 2 bad arguments or
    settings. ``ui``: 0
    stopped by a signal, 1 cannot listen, 2 bad settings (no authentication beyond loopback).
    """
    from lakehouse_writer.errors import WriterFailed

    args = _parser().parse_args(argv)
    if args.command != "run":
        return admin_command(args)
    try:
        run_command(argv)
    except ConfigError as exc:  # names the variable, never a value
        say_error("lakehouse-writer", str(exc))
        return 2
    except WriterFailed:
        return 1  # recorded and logged by the run
    return 0


def run_command(argv: Sequence[str] | None = None) -> None:
    """Run the lakehouse writer with ``argv`` (default ``sys.argv[1:]``); raise on failure.

    ``status`` and ``resume-table`` raise :class:`SystemExit` with their non-zero exit code.

    Raises:
        ConfigError: A setting is missing or wrong (names the variable, never its value).
        WriterFailed: The run failed; the status file says ``failed`` with the same cause.
        SystemExit: The arguments are wrong (argparse's usage message, code 2).
    """
    from lakehouse_writer.settings import LakehouseSettings

    args = _parser().parse_args(argv)
    if args.command != "run":  # status, resume-table, maintain: an exit code says how it went
        code = admin_command(args)
        if code:
            raise SystemExit(code)
        return
    configure_logging("INFO")  # LOG_FORMAT, LOG_LEVEL
    settings = LakehouseSettings(**_overrides(args))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal received signal=%d; stopping after the current batch", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    _run(args, settings, stop)


def _run(args: argparse.Namespace, settings: LakehouseSettings, stop: threading.Event) -> None:
    """Probe Kafka, start Spark, run; every failure ends in status ``failed`` and one line.

    A ``--once`` run that Kafka shows has nothing to read starts no Spark
    (:mod:`lakehouse_writer.read.caught_up`).

    Raises:
        WriterFailed: The run failed (recorded in the status file, logged).
    """
    from lakehouse_writer.errors import WriterFailed
    from lakehouse_writer.ops.watch import watching
    from lakehouse_writer.read.caught_up import caught_up
    from lakehouse_writer.runtime.failure import keep_traces_off_stderr, report_failure
    from lakehouse_writer.runtime.probe import probe_kafka
    from lakehouse_writer.runtime.session import refuse_spark_connect
    from lakehouse_writer.runtime.storage import is_local
    from lakehouse_writer.stream import job

    try:
        refuse_spark_connect(dict(args.conf))  # before anything starts
        timeout = settings.connect_timeout_s
        # Kafka is asked before Spark's ~10 s start, unless the checkpoint is on a Hadoop
        # file system: only Spark can write there that Kafka did not answer.
        spark = None if is_local(settings.checkpoint_path) else start_session(args, settings)
        probe_kafka(settings.kafka_client_conf(), timeout)
        # With a catalog, a start registers tables made before it was configured: Spark runs.
        idle = args.once and spark is None and not settings.catalog
        if idle and caught_up(settings, timeout) is not None:
            return  # Kafka holds nothing the last run did not apply: no Spark to start
        spark = spark or start_session(args, settings)
        keep_traces_off_stderr(spark)
        with watching(settings):  # LAKEHOUSE_METRICS_PORT, LAKEHOUSE_MONITOR_GROUP
            job.run(spark, settings, once=args.once, stop=stop, connect_timeout_s=timeout)
    except WriterFailed:
        raise
    except Exception as exc:
        raise report_failure(settings, exc) from exc


def start_session(
    args: argparse.Namespace, settings: LakehouseSettings | None = None
) -> SparkSession:
    """The writer's session for ``run``'s arguments (master, ``--conf``, ``--jars``).

    A driver the writer starts itself (a master of its own, not ``spark-submit``'s) logs in
    the writer's format and level (:func:`jvm_logging`).

    Raises:
        SparkConnectUnsupported: The session would be a Spark Connect one.
        ConnectorsMissing: The session lacks the Kafka, Avro or Delta classes.
    """
    from lakehouse_writer.runtime.session import (
        build_spark_session,
        check_connectors,
        resolve_master,
    )
    from lakehouse_writer.tables.catalog import CATALOG_IMPLEMENTATION, SESSION_CATALOG

    master = resolve_master(args.master, configured=settings.spark_master if settings else None)
    conf = {**azure_hadoop_settings(settings), **dict(args.conf)}  # a --conf of the user's wins
    if master is not None and settings is not None and settings.catalog == SESSION_CATALOG:
        conf.setdefault(CATALOG_IMPLEMENTATION, "hive")  # in-memory names die with the run
    if master is not None:
        conf.update(jvm_logging(LogSettings(), logging.getLogger().getEffectiveLevel(), conf))
    continuous = args.command == "run" and not getattr(args, "once", False)  # watchable: UI on
    spark = build_spark_session(master=master, jars=args.jars, conf=conf, ui=continuous)
    log.info(
        "spark session master=%s ui=%s", spark.sparkContext.master, spark.sparkContext.uiWebUrl
    )
    check_connectors(spark)
    return spark


def azure_hadoop_settings(settings: LakehouseSettings | None) -> dict[str, str]:
    """hadoop-azure's ``spark.hadoop.fs.azure.*`` settings for the lakehouse and checkpoint.

    From ``AZURE_STORAGE_*`` (:mod:`lakehouse_writer.runtime.azure`), for the Azure URIs among
    the two paths; {} when neither is one.

    Raises:
        AzureStorageUnusable: The credential cannot open one of them (the message says why).
    """
    from lakehouse_writer.runtime.azure import AzurePath, hadoop_settings
    from producer_lib.settings import AzureStorageSettings

    if settings is None:
        return {}
    paths = (settings.lakehouse_path, settings.checkpoint_path)
    if not any(AzurePath.parse(p) for p in paths):
        return {}
    return hadoop_settings(AzureStorageSettings(), *paths)


def jvm_logging(
    settings: LogSettings, level: int, conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``spark.driver.extraJavaOptions`` that make the driver's log4j2 log as the writer does.

    The layout of ``LOG_FORMAT`` (``lakehouse_writer/runtime/log4j2``), at ``level`` but never below
    WARN. Java options given in ``conf`` come after the writer's, so a
    ``-Dlog4j2.configurationFile`` of the user's wins.
    """
    folder = Path(__file__).parent / "runtime" / "log4j2"
    jvm_level = "WARN" if level <= logging.WARNING else logging.getLevelName(level)
    options = [
        f"-Dlog4j2.configurationFile={folder / f'{settings.format}.properties'}",
        f"-Dlakehouse.log.level={jvm_level}",
        f"-Dlakehouse.log.template={(folder / 'layout.json').as_uri()}",
    ]
    theirs = (conf or {}).get(_JAVA_OPTIONS, "")
    quoted = [f'"{o}"' if any(c.isspace() for c in o) else o for o in options]
    return {_JAVA_OPTIONS: " ".join([*quoted, theirs]).strip()}


def _ui(args: argparse.Namespace, settings: LakehouseSettings, session: Any) -> int:
    """``ui``: serve the status page until SIGTERM or Ctrl-C."""
    from lakehouse_writer.ops.ui.command import ui_command

    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    return ui_command(settings, session, args.host, args.port, args.insecure, args.refresh, stop)


def admin_command(args: argparse.Namespace) -> int:
    """``status``, ``resume-table``, ``maintain``, ``replay-rejected`` or ``ui``: exit code."""
    from lakehouse_writer.errors import LakehouseWriterError
    from lakehouse_writer.ops.admin import resume_command, status_command
    from lakehouse_writer.ops.rebuild import rebuild_command
    from lakehouse_writer.ops.replay import replay_command
    from lakehouse_writer.settings import LakehouseSettings
    from lakehouse_writer.tables.maintain import maintain_command

    try:
        # LOG_FORMAT, LOG_LEVEL: an operator's command says little; a server logs its requests.
        configure_logging("INFO" if args.command == "ui" else "WARNING")
        settings = LakehouseSettings(**_overrides(args))
        session = partial(start_session, args, settings)
        if args.command == "ui":
            return _ui(args, settings, session)
        if args.command == "maintain":
            return maintain_command(
                session, settings.lakehouse_path, args.table, args.dry_run, settings.maintain
            )
        if args.command == "status":
            return status_command(settings, session, as_json=args.json)
        if args.command == "replay-rejected":
            return replay_command(settings, session, args.table, args.since, args.dry_run)
        if args.command == "rebuild":
            return rebuild_command(settings, session, args.table, args.dry_run)
        return resume_command(settings, session, args.table, args.force)
    except ConfigError as exc:
        say_error("lakehouse-writer", str(exc))
        return 2
    except LakehouseWriterError as exc:
        say_error(f"lakehouse-writer {args.command}", str(exc))
        return 1
