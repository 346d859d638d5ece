"""``devstack``: the local stack for the demo and the tests.

Usage::

    devstack up [--registry]   start the Kafka broker (and the schema registry); idempotent
    devstack up --brokers 3    start a three-broker cluster (RF 3, min ISR 2) on 19192-19197
                               (DEVSTACK_CLUSTER_PORT) beside it
    devstack up --secure [--flow FUNCTION[=TOPIC_PREFIX]]...
                               start the secured broker (SASL_SSL, SCRAM, ACLs) beside it and
                               print the settings of its flow and writer users (dev passwords)
    devstack down [--secure | --brokers 3]
                               stop what devstack started (brokers, cluster and registry), or
                               the secured broker / the cluster only; nothing else
    devstack status [--brokers 3]
                               say what runs; exit 0 if the broker (with --brokers 3: every
                               node of the cluster) runs, 3 if not
    devstack env [--brokers 3] print KAFKA_BOOTSTRAP_SERVERS=... (of the cluster with
                               --brokers 3) and, when the registry runs, SCHEMA_REGISTRY_URL=...
                               (for `eval $(devstack env)`)
    devstack env --secure --user USER
                               the KAFKA_* settings of USER on the secured broker
    devstack jars              resolve the JVM jars with Maven (done by `up` when needed)
    devstack compat LINE       build the virtual environment of Spark LINE (3.5, 4.0) with its
                               jars, for the compat suite; print its python
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from devstack import broker, cluster, compat, jars, registry, secure
from devstack.errors import DevstackError
from producer_lib._version import installed_version
from producer_lib.errors import ConfigError
from producer_lib.logs import configure_logging, say_error

EXIT_NOT_RUNNING = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``devstack`` command; return the exit code."""
    args = _parser().parse_args(argv)
    try:
        configure_logging(text_format="devstack: %(message)s")
    except ConfigError as exc:  # LOG_FORMAT or LOG_LEVEL
        say_error("devstack", f"error: {exc}")
        return 2
    try:
        return int(args.func(args))
    except DevstackError as exc:
        say_error("devstack", f"error: {exc}")
        return 1


def _up(args: argparse.Namespace) -> int:
    if args.secure:
        return _up_secure(args)
    if args.brokers == cluster.SIZE:
        return _up_cluster()
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


def _up_cluster() -> int:
    layout = cluster.ClusterLayout.default()
    was_running = all(pid is not None for pid in cluster.status(layout).values())
    cluster.up(layout)
    state = "already running" if was_running else "started"
    print(f"kafka cluster: {state} at {layout.bootstrap} (logs {layout.root})")
    _print_nodes(layout)
    return 0


def _print_nodes(layout: cluster.ClusterLayout) -> None:
    for node_id, pid in cluster.status(layout).items():
        node = layout.node(node_id)
        state = f"running (pid {pid})" if pid else "not running"
        print(f"kafka cluster node {node_id}: {state} at {node.bootstrap}")


def _up_secure(args: argparse.Namespace) -> int:
    flows = [secure.FlowGrant.parse(f, args.environment, args.zone) for f in args.flow or []]
    flows = flows or list(secure.DEFAULT_FLOWS)
    was_running = secure.status() is not None
    layout = secure.up(flows=flows)
    state = "already running" if was_running else "started"
    print(
        f"kafka (secured): {state} at {layout.bootstrap} (pid {secure.status(layout)}, "
        f"logs {layout.root})"
    )
    print(settings_text(layout, flows))
    return 0


def settings_text(layout: secure.SecureLayout, flows: list[secure.FlowGrant]) -> str:
    """What a user needs to connect flows and the writer to the secured broker."""
    passwords = secure.credentials(layout)
    lines = [
        "# DEV-ONLY passwords, generated for this local broker (kept in "
        f"{layout.credentials_file}); never use them anywhere else.",
    ]
    who = [
        (
            f.user,
            f"flow {f.function}: writes topics {f.topic_prefix}* and the system "
            f"topics, transactional ids {f.transactional_id_prefix}*",
        )
        for f in flows
    ]
    who.append((secure.WRITER, "the lakehouse writer: reads every topic, writes none"))
    for user, text in who:
        lines += ["", f"# {text}"]
        env = secure.env_settings(layout, user, passwords[user])
        lines += [f"{name}={value}" for name, value in env.items()]
    lines += [
        "",
        f"# the super user {secure.ADMIN!r} (ACLs, users): its password is in "
        f"{layout.credentials_file}",
    ]
    return "\n".join(lines)


def _down(args: argparse.Namespace) -> int:
    if args.brokers == cluster.SIZE:
        print("kafka cluster: stopped" if cluster.down() else "kafka cluster: was not running")
        return 0
    if secure.down():
        print("kafka (secured): stopped")
    if args.secure:
        return 0
    if cluster.down():
        print("kafka cluster: stopped")
    if registry.down():
        print("schema registry: stopped")
    stopped = broker.down()
    print("kafka: stopped" if stopped else "kafka: was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    """What runs; exit 3 when the plaintext broker does not (the secured one is shown too)."""
    layout = broker.BrokerLayout.default()
    pid = broker.status(layout)
    secured = secure.SecureLayout.default()
    secured_pid = secure.status(secured)
    if pid is None:
        print("kafka: not running")
    else:
        print(f"kafka: running at {layout.bootstrap} (pid {pid})")
        reg = registry.RegistryLayout.default()
        reg_pid = registry.status(reg)
        print(
            f"schema registry: running at {reg.url} (pid {reg_pid})"
            if reg_pid
            else "schema registry: not running"
        )
    if secured_pid is not None:
        print(f"kafka (secured): running at {secured.bootstrap} (pid {secured_pid})")
    nodes = cluster.status()
    if args.brokers == cluster.SIZE or any(nodes.values()):
        _print_nodes(cluster.ClusterLayout.default())
    if args.brokers == cluster.SIZE:
        return 0 if all(nodes.values()) else EXIT_NOT_RUNNING
    return EXIT_NOT_RUNNING if pid is None else 0


def _env(args: argparse.Namespace) -> int:
    if args.secure:
        layout = secure.SecureLayout.default()
        passwords = secure.credentials(layout)
        if args.user not in passwords or args.user == "keystore":
            known = ", ".join(sorted(u for u in passwords if u != "keystore")) or "none yet"
            raise DevstackError(
                f"no user {args.user!r} on the secured broker (known: {known}); "
                "start it with `devstack up --secure [--flow FUNCTION=TOPIC_PREFIX]`"
            )
        for name, value in secure.env_settings(layout, args.user, passwords[args.user]).items():
            print(f"{name}={value}")
        return 0
    if args.brokers == cluster.SIZE:
        print(f"KAFKA_BOOTSTRAP_SERVERS={cluster.ClusterLayout.default().bootstrap}")
    else:
        print(f"KAFKA_BOOTSTRAP_SERVERS={broker.BrokerLayout.default().bootstrap}")
    if registry.status() is not None:
        print(f"SCHEMA_REGISTRY_URL={registry.RegistryLayout.default().url}")
    return 0


def _compat(args: argparse.Namespace) -> int:
    print(compat.environment(args.line).python)
    return 0


def _jars(args: argparse.Namespace) -> int:
    for profile in jars.DEFAULT_PROFILES:
        folder = jars.jar_dir(profile)
        print(f"{profile}: {len(list(folder.glob('*.jar')))} jars in {folder}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devstack",
        description="The local stack for the demo and the tests, without Docker: a real Apache\n"
        "Kafka broker (KRaft, transactions on) from Maven Central jars on 127.0.0.1:19092\n"
        "(DEVSTACK_KAFKA_PORT), and on request a schema registry, a secured broker or a\n"
        "three-broker cluster. State lives in .devstack/ (DEVSTACK_HOME).",
        epilog='examples:\n  devstack up\n  eval "$(devstack env)"\n  devstack status\n'
        "  devstack down\n\nLogs go to stderr: LOG_FORMAT=json for one JSON object a line.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, func, text in [
        ("up", _up, "start the local Kafka broker; running it twice is fine"),
        ("down", _down, "stop what devstack started, nothing else"),
        ("status", _status, "show what runs; exit 0 when the broker runs, 3 when not"),
        ("env", _env, 'print KAFKA_BOOTSTRAP_SERVERS=... for eval "$(devstack env)"'),
        ("jars", _jars, "resolve the JVM jars with Maven (up does it when needed)"),
        ("compat", _compat, "build a Spark line's virtual environment for the compat suite"),
    ]:
        cmd = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        cmd.set_defaults(func=func)
        if name in {"up", "down", "status", "env"}:
            cmd.add_argument(
                "--brokers",
                type=int,
                choices=(1, cluster.SIZE),
                default=1,
                help=f"{cluster.SIZE}: the three-broker cluster (ports from "
                f"{cluster.DEFAULT_BASE_PORT}, DEVSTACK_CLUSTER_PORT); 1: the single broker",
            )
        if name == "up":
            cmd.add_argument(
                "--registry",
                action="store_true",
                help="also start a Confluent-compatible schema registry (Apicurio, Java 21+)",
            )
            _secure_options(cmd)
        if name == "compat":
            cmd.add_argument("line", choices=sorted(compat.COMPAT_LINES), help="the Spark line")
        if name == "down":
            cmd.add_argument("--secure", action="store_true", help="stop the secured broker only")
        if name == "env":
            cmd.add_argument(
                "--secure", action="store_true", help="the settings of a user of the secured broker"
            )
            cmd.add_argument(
                "--user",
                default=secure.WRITER,
                help="with --secure: writer (default) or flow-<function>",
            )
    return parser


def _secure_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--secure",
        action="store_true",
        help=f"start the secured broker (SASL_SSL, SCRAM-SHA-512, ACLs) on port "
        f"{secure.DEFAULT_PORT} (DEVSTACK_SECURE_PORT) beside the plaintext one",
    )
    cmd.add_argument(
        "--flow",
        action="append",
        metavar="FUNCTION[=TOPIC_PREFIX]",
        help="with --secure: a flow user flow-FUNCTION owning the topics TOPIC_PREFIX* "
        "(default FUNCTION.); repeatable; default: tpch=tpch.",
    )
    cmd.add_argument(
        "--environment",
        default="dev",
        help="with --flow: the environment part of its transactional ids",
    )
    cmd.add_argument(
        "--zone", default="bronze", help="with --flow: the zone part of its transactional ids"
    )


if __name__ == "__main__":
    sys.exit(main())
