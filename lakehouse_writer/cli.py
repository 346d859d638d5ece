"""Command line: ``lakehouse-writer run --lakehouse PATH --checkpoint PATH [--once] ...``.

SIGTERM or SIGINT stop the writer after the batch it is applying (exit code 0, status file
state ``stopped``). A failed run exits with 1: the status file says ``failed`` with the root
cause, the last line on stderr names it, and ``writer_error.log`` in the checkpoint holds
the whole trace. Kafka is asked first whether it answers within ``--connect-timeout``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from producer_lib.errors import ConfigError

if TYPE_CHECKING:
    from lakehouse_writer.settings import LakehouseSettings

log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse-writer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="apply Kafka change rows to Delta tables")
    run.add_argument("--lakehouse", help="root of the Delta tables (LAKEHOUSE_PATH)")
    run.add_argument("--checkpoint", help="checkpoint directory (LAKEHOUSE_CHECKPOINT_PATH)")
    run.add_argument("--topics", help="Java regex of topics to read (LAKEHOUSE_TOPICS_REGEX)")
    run.add_argument("--once", action="store_true", help="drain what is there, then exit")
    run.add_argument("--trigger-interval", type=float, help="seconds between micro-batches")
    run.add_argument("--max-offsets-per-trigger", type=int, help="bound of one micro-batch")
    run.add_argument("--bootstrap-servers", help="Kafka bootstrap (KAFKA_BOOTSTRAP_SERVERS)")
    run.add_argument(
        "--connect-timeout",
        type=float,
        help="seconds Kafka has to answer at start (LAKEHOUSE_CONNECT_TIMEOUT_S, 30)",
    )
    run.add_argument("--master", default="local[2]", help="Spark master; 'env' to inherit")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {
        "LAKEHOUSE_PATH": args.lakehouse, "LAKEHOUSE_CHECKPOINT_PATH": args.checkpoint,
        "LAKEHOUSE_TOPICS_REGEX": args.topics,
        "LAKEHOUSE_TRIGGER_INTERVAL_S": args.trigger_interval,
        "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": args.max_offsets_per_trigger,
        "KAFKA_BOOTSTRAP_SERVERS": args.bootstrap_servers,
    }  # fmt: skip
    return {k: v for k, v in pairs.items() if v is not None}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the lakehouse writer; returns the process exit code."""
    from lakehouse_writer.settings import LakehouseSettings

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = LakehouseSettings(**_overrides(args))
    except ConfigError as exc:  # names the variable, never a value
        print(f"lakehouse-writer: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal received signal=%d; stopping after the current batch", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    return _run(args, settings, stop)


def _run(args: argparse.Namespace, settings: LakehouseSettings, stop: threading.Event) -> int:
    """Probe Kafka, start Spark, run; every failure ends in status ``failed`` and one line."""
    from lakehouse_writer import job
    from lakehouse_writer.errors import WriterFailed
    from lakehouse_writer.failure import keep_traces_off_stderr, report_failure
    from lakehouse_writer.probe import connect_timeout, probe_kafka
    from lakehouse_writer.session import build_spark_session

    try:
        timeout = connect_timeout(args.connect_timeout)
        probe_kafka(settings.kafka_client_conf(), timeout)  # before Spark's ~10 s start
        spark = build_spark_session(master=None if args.master == "env" else args.master)
        keep_traces_off_stderr(spark)
        job.run(spark, settings, once=args.once, stop=stop, connect_timeout_s=timeout)
    except WriterFailed:
        return 1  # recorded and logged by the run
    except Exception as exc:
        report_failure(settings, exc)
        return 1
    return 0
