"""``producer-lib``: run a flow once, or serve it over HTTP.

::

    producer-lib run flows.tpch:TpchFlow --load initial [--dataflow D] [--partition P]
    producer-lib serve flows.tpch:TpchFlow [--host 127.0.0.1] [--port 8080] [--insecure]

``MODULE`` is imported with ``--app-dir`` (default: the current directory) first on
``sys.path``, as uvicorn does, so a flow repo's own modules are found without installing it.

``run`` prints the run's result as JSON and exits 0 when it completed, 1 when it failed,
2 on bad usage. Settings come from the environment (``KAFKA_*``, ``FLOW_ENVIRONMENT``...).

``serve`` answers only authenticated callers (``FLOW_AUTH_*``: function keys, Entra ID; see
``docs/SERVING.md``). Without any authentication configured it serves on loopback only and
refuses another ``--host`` (exit 2) unless ``--insecure`` is given, for development only.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from collections.abc import Sequence

from producer_lib._version import installed_version
from producer_lib.errors import ConfigError, ProducerLibError
from producer_lib.logs import configure_logging, say_error
from producer_lib.runner import FunctionRunner, RunFailed

__all__ = ["load_runner", "main"]


def load_runner(spec: str, app_dir: str | None = None) -> FunctionRunner:
    """Import ``MODULE:CLASS`` and build the runner (no arguments).

    Args:
        spec: ``MODULE:CLASS``, e.g. ``flows.tpch:TpchFlow``.
        app_dir: Directory put first on ``sys.path`` before the import (None: leave
            ``sys.path`` alone).

    Raises:
        ConfigError: The spec is malformed, or does not name a FunctionRunner subclass.
    """
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise ConfigError("expected MODULE:CLASS, e.g. flows.tpch:TpchFlow", runner=spec)
    if app_dir is not None:
        _put_first_on_path(app_dir)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import the runner: {exc}", runner=spec) from exc
    if not (isinstance(cls, type) and issubclass(cls, FunctionRunner)):
        raise ConfigError("not a FunctionRunner subclass", runner=spec)
    return cls()


def _put_first_on_path(app_dir: str) -> None:
    path = os.path.abspath(app_dir)
    if not os.path.isdir(path):
        raise ConfigError("the app directory does not exist", app_dir=app_dir)
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)


_DESCRIPTION = """\
Run a flow once from the command line, or serve it over HTTP in a container.

A flow is a FunctionRunner subclass in your repository, named MODULE:CLASS (e.g.
flow:CitiesFlow for the class CitiesFlow in flow.py of the current folder). Kafka and the
other settings come from environment variables (KAFKA_BOOTSTRAP_SERVERS, ...; a .env file
works too): docs/ENVIRONMENT.md lists them all.
"""
_EPILOG = """\
examples:
  producer-lib run flow:CitiesFlow --load initial
  producer-lib serve flow:CitiesFlow --port 8080

Logs go to stderr: LOG_FORMAT=json for one JSON object a line, LOG_LEVEL=DEBUG for more.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="producer-lib",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="least level logged (default: LOG_LEVEL, else INFO)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run one load and print its result as JSON",
        description="Run one load of the flow and print its result (rows per table, commit "
        "id) as JSON on stdout. Exit code 0: completed, 1: failed, 2: bad settings or usage.",
    )
    run.add_argument("runner", metavar="MODULE:CLASS", help="the flow, e.g. flow:CitiesFlow")
    run.add_argument(
        "--load",
        choices=("initial", "delta"),
        required=True,
        help="initial: the flow's initial_load; delta: its delta_load (from its delta pointer)",
    )
    run.add_argument("--dataflow", default="default", help="the dataflow (default: default)")
    run.add_argument("--partition", default="0", help="the partition (default: 0)")
    _app_dir_argument(run)
    serve = commands.add_parser(
        "serve",
        help="serve the flow over HTTP (POST /run, GET /health)",
        description="Serve the flow over HTTP, as a container does: POST /run?load=initial|delta "
        "starts a load, GET /health says whether the settings are usable. Every route but "
        "/health needs a function key or an Entra ID token (FLOW_AUTH_*, docs/SERVING.md). "
        "SIGTERM stops it.",
    )
    serve.add_argument("runner", metavar="MODULE:CLASS", help="the flow, e.g. flow:CitiesFlow")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 in a container, which "
        "needs FLOW_AUTH_* settings)",
    )
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="DEVELOPMENT ONLY: serve on a non-loopback --host without any authentication",
    )
    _app_dir_argument(serve)
    return parser


def _app_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app-dir",
        default=".",
        help="directory to import MODULE from, first on sys.path (default: .)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``producer-lib``; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        configure_logging(args.log_level or "INFO")
        runner = load_runner(args.runner, args.app_dir)
        if args.command == "serve":
            from producer_lib.runner.serve import serve

            serve(runner, args.host, args.port, insecure=args.insecure)
            return 0
        result = asyncio.run(
            runner.run(args.load, dataflow=args.dataflow, partition=args.partition)
        )
    except RunFailed as exc:
        print(json.dumps(exc.result.to_json(), default=str))
        return 1
    except ConfigError as exc:
        say_error("producer-lib", str(exc))
        return 2
    except ProducerLibError as exc:
        say_error("producer-lib", str(exc))
        return 1
    print(json.dumps(result.to_json(), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
