"""Command line: ``lakehouse-writer run --lakehouse PATH --checkpoint PATH [--once] ...``.

SIGTERM or SIGINT stop the writer after the batch it is applying (exit code 0, status file
state ``stopped``); a failed query exits with 1 (state ``failed``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

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
    from lakehouse_writer import job
    from lakehouse_writer.session import build_spark_session
    from lakehouse_writer.settings import LakehouseSettings

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = LakehouseSettings(**_overrides(args))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal received signal=%d; stopping after the current batch", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    spark = build_spark_session(master=None if args.master == "env" else args.master)
    try:
        job.run(spark, settings, once=args.once, stop=stop)
    except Exception as exc:
        log.error("writer failed error=%s", exc)
        return 1
    return 0
