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
import logging
import os
import sys
from collections.abc import Sequence

from producer_lib.errors import ConfigError, ProducerLibError
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="producer-lib", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one load and exit")
    run.add_argument("runner", metavar="MODULE:CLASS")
    run.add_argument("--load", choices=("initial", "delta"), required=True)
    run.add_argument("--dataflow", default="default")
    run.add_argument("--partition", default="0")
    _app_dir_argument(run)
    serve = commands.add_parser("serve", help="serve the flow over HTTP (POST /run, GET /health)")
    serve.add_argument("runner", metavar="MODULE:CLASS")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 in a container, which "
        "needs FLOW_AUTH_* settings)",
    )
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="DEVELOPMENT ONLY: serve on a non-loopback --host without any authentication",
    )
    _app_dir_argument(serve)
    parser.add_argument("--log-level", default="INFO")
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
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
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
        print(f"producer-lib: {exc}", file=sys.stderr)
        return 2
    except ProducerLibError as exc:
        print(f"producer-lib: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result.to_json(), default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
