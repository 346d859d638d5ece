"""``devstack``: the local stack for the demo and the tests.

Usage::

    devstack up [--registry]   start the Kafka broker (and the schema registry); idempotent
    devstack down              stop what devstack started (broker and registry), nothing else
    devstack status            say what runs; exit 0 if the broker runs, 3 if not
    devstack env               print KAFKA_BOOTSTRAP_SERVERS=... and, when the registry runs,
                               SCHEMA_REGISTRY_URL=... (for `eval $(devstack env)`)
    devstack jars              resolve the JVM jars with Maven (done by `up` when needed)
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from devstack import broker, jars, registry
from devstack.errors import DevstackError

EXIT_NOT_RUNNING = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``devstack`` command; return the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="devstack: %(message)s")
    try:
        return int(args.func(args))
    except DevstackError as exc:
        print(f"devstack: error: {exc}", file=sys.stderr)
        return 1


def _up(args: argparse.Namespace) -> int:
    was_running = broker.status() is not None
    layout = broker.up()
    state = "already running" if was_running else "started"
    print(f"kafka: {state} at {layout.bootstrap} (pid {broker.status()}, logs {layout.root})")
    if args.registry:
        was_running = registry.status() is not None
        reg = registry.up()
        state = "already running" if was_running else "started"
        print(f"schema registry: {state} at {reg.url} (pid {registry.status()})")
    return 0


def _down(args: argparse.Namespace) -> int:
    if registry.down():
        print("schema registry: stopped")
    stopped = broker.down()
    print("kafka: stopped" if stopped else "kafka: was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    layout = broker.BrokerLayout.default()
    pid = broker.status(layout)
    if pid is None:
        print("kafka: not running")
        return EXIT_NOT_RUNNING
    print(f"kafka: running at {layout.bootstrap} (pid {pid})")
    reg = registry.RegistryLayout.default()
    reg_pid = registry.status(reg)
    print(f"schema registry: running at {reg.url} (pid {reg_pid})" if reg_pid else
          "schema registry: not running")  # fmt: skip
    return 0


def _env(args: argparse.Namespace) -> int:
    print(f"KAFKA_BOOTSTRAP_SERVERS={broker.BrokerLayout.default().bootstrap}")
    if registry.status() is not None:
        print(f"SCHEMA_REGISTRY_URL={registry.RegistryLayout.default().url}")
    return 0


def _jars(args: argparse.Namespace) -> int:
    for profile in jars.DEFAULT_PROFILES:
        folder = jars.jar_dir(profile)
        print(f"{profile}: {len(list(folder.glob('*.jar')))} jars in {folder}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, text in [
        ("up", _up, "start the local Kafka broker (idempotent)"),
        ("down", _down, "stop what devstack started"),
        ("status", _status, "show what runs"),
        ("env", _env, "print the environment that points clients at the stack"),
        ("jars", _jars, "resolve the JVM jars with Maven"),
    ]:
        cmd = sub.add_parser(name, help=text)
        cmd.set_defaults(func=func)
        if name == "up":
            cmd.add_argument(
                "--registry", action="store_true",
                help="also start a Confluent-compatible schema registry (Apicurio, Java 21+)",
            )  # fmt: skip
    return parser


if __name__ == "__main__":
    sys.exit(main())
