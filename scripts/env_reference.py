"""Write docs/ENVIRONMENT.md: every environment variable the platform reads, from the code.

Usage::

    .venv/bin/python scripts/env_reference.py          # rewrites docs/ENVIRONMENT.md
    .venv/bin/python scripts/env_reference.py --check  # exit 1 when the file is out of date

The settings classes are the source: each field's variable, type and default come from the
class, its text from the class docstring's ``Attributes:`` section. Variables read by name at
run time (secrets, the tools' own such as ``JAVA_HOME``, devstack's ports, the example flows')
are listed in :data:`BY_NAME` below. ``tests/test_environment_reference.py`` regenerates the
file and compares, and scans the code for every ``os.environ`` read: each must be here.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "docs" / "ENVIRONMENT.md"
if str(REPO) not in sys.path:  # run as a script: the repository's packages first
    sys.path.insert(0, str(REPO))

from lakehouse_writer.settings import LakehouseSettings  # noqa: E402
from producer_lib.auth.settings import AuthSettings  # noqa: E402
from producer_lib.runner.serve_guard import ServeSettings  # noqa: E402
from producer_lib.settings import (  # noqa: E402
    AzureStorageSettings,
    EnvSettings,
    FlowSettings,
    KafkaSettings,
    LogSettings,
    SchemaRegistrySettings,
    TriggerSettings,
)

# (section title, what it is for, its settings classes)
SECTIONS: list[tuple[str, str, list[type[EnvSettings]]]] = [
    (
        "Kafka",
        "How flows and the writer reach Kafka (`producer_lib.settings.KafkaSettings`). The "
        "writer takes the same variables and refuses the same combinations.",
        [KafkaSettings],
    ),
    (
        "Schemas",
        "Where value and key schemas go: a Confluent-compatible schema registry, else the "
        "catalog topic (`SchemaRegistrySettings`).",
        [SchemaRegistrySettings],
    ),
    (
        "Flows",
        "Where a flow runs and how its HTTP triggers answer (`FlowSettings`, `TriggerSettings`).",
        [FlowSettings, TriggerSettings],
    ),
    (
        "Who may call a flow's HTTP server",
        "Function keys and Microsoft Entra ID tokens that `producer-lib serve` accepts "
        "(`producer_lib.auth.AuthSettings`), and the server's limits (`ServeSettings`); see "
        "docs/SERVING.md.",
        [AuthSettings, ServeSettings],
    ),
    (
        "Azure storage in a flow's SQL",
        "Credentials for `az://` and `abfss://` paths in the SQL given to `reader.load` "
        "(`AzureStorageSettings`); the first of connection string, service principal and "
        "credential chain that is set is used.",
        [AzureStorageSettings],
    ),
    (
        "Logs",
        "The log lines of `producer-lib`, `lakehouse-writer`, `devstack` and the flow-repo "
        'template\'s function app (`LogSettings`); see docs/OPERATIONS.md, "Logs".',
        [LogSettings],
    ),
    (
        "Lakehouse writer",
        "`lakehouse-writer` (`lakehouse_writer.settings.LakehouseSettings`); command-line "
        "options win over them. It also reads every `KAFKA_*` variable of the Kafka section.",
        [LakehouseSettings],
    ),
]


@dataclass(frozen=True)
class ByName:
    """A variable read by name where it is used, not through a settings class."""

    name: str
    default: str
    text: str


# Variables read by name: (section title, what the section is, its variables).
BY_NAME: list[tuple[str, str, list[ByName]]] = [
    (
        "Secrets of flows",
        "Read by `azure_utils.read_secret(name)` and `OracleConnectionSettings(name)` when a "
        "flow asks for a secret (`producer_lib/azure_utils.py`).",
        [
            ByName(
                "AZURE_KEY_VAULT_URL",
                "unset",
                "Read secrets from this Azure Key Vault (extra `azure`; credentials through "
                "`DefaultAzureCredential`: managed identity, `az login`, or the Azure SDK's "
                "own `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`, `AZURE_CLIENT_SECRET`).",
            ),
            ByName(
                "SECRET_<NAME>",
                "unset",
                "Without a vault, the secret `<name>`: upper case, every character but A-Z "
                "and 0-9 as `_` (`StarTek-Source` -> `SECRET_STARTEK_SOURCE`). A missing "
                "secret is an error naming the variable.",
            ),
        ],
    ),
    (
        "OpenLineage",
        "Read when a flow run starts (`producer_lib/runner/openlineage.py`, docs/LINEAGE.md). "
        "Any of the first three turns the run events on; the OpenLineage client (extra "
        "`lineage`) then reads its own configuration from them, as its documentation says.",
        [
            ByName(
                "OPENLINEAGE_URL",
                "unset",
                "Send the events over HTTP to this URL (`OPENLINEAGE_ENDPOINT`, default "
                "`api/v1/lineage`, and `OPENLINEAGE_API_KEY` are the client's).",
            ),
            ByName(
                "OPENLINEAGE_CONFIG",
                "unset",
                "Path of the client's `openlineage.yml` (transport: http, console, file, "
                "kafka...). A file found only in the working directory does not turn events "
                "on.",
            ),
            ByName(
                "OPENLINEAGE__<KEY>",
                "unset",
                "The client's configuration as variables, e.g. "
                "`OPENLINEAGE__TRANSPORT__TYPE=console`.",
            ),
            ByName(
                "OPENLINEAGE_DISABLED",
                "unset",
                "`true`: no events, whatever else is set.",
            ),
            ByName(
                "OPENLINEAGE_NAMESPACE",
                "the flow's `source_system`",
                "The namespace of the flows' jobs.",
            ),
            ByName(
                "PGHOST",
                "`localhost`",
                "With `PGPORT` (`5432`), `PGDATABASE` and `PGUSER`: libpq's defaults, for the "
                "dataset names of a `PostgresReader` whose DSN leaves them out.",
            ),
            ByName("PGPORT", "`5432`", "See `PGHOST`."),
            ByName("PGDATABASE", "the user", "See `PGHOST`."),
            ByName("PGUSER", "unset", "See `PGHOST`."),
        ],
    ),
    (
        "Flow-repo template",
        "Read by `templates/flow_repo/function_app.py` (app settings of the function app).",
        [
            ByName("FLOW_RUNNER", "required", "The flow class, `MODULE:CLASS`."),
            ByName(
                "FLOW_TIMER_SCHEDULE",
                "unset",
                "An NCRONTAB expression (six fields): runs the delta load on that schedule; "
                "unset: no timer function.",
            ),
        ],
    ),
    (
        "The writer's machine",
        "Read where the writer builds its Spark session: where the connector jars are, "
        "which Spark and Java run. They describe the machine, so they are read where they "
        "are used, also by the tests, the benchmarks and devstack.",
        [
            ByName(
                "LAKEHOUSE_JARS_DIR",
                "`$XDG_CACHE_HOME/flow-platform/jars/spark-<line>`",
                "Where the writer's Spark connector jars are resolved with Maven; jars put "
                "there by hand are used as they are.",
            ),
            ByName(
                "XDG_CACHE_HOME",
                "`~/.cache`",
                "The cache root of the jars and of the compiled local file system classes.",
            ),
            ByName(
                "SPARK_HOME",
                "pyspark's",
                "A Spark distribution: its `jars/` may hold the connectors, its `conf/` a "
                "`spark-defaults.conf` naming the master.",
            ),
            ByName(
                "SPARK_CONF_DIR",
                "`$SPARK_HOME/conf`",
                "Where `spark-defaults.conf` is looked for (`spark.master`).",
            ),
            ByName(
                "PYSPARK_GATEWAY_PORT",
                "unset",
                "Set by `spark-submit`: the master is then `spark-submit`'s.",
            ),
            ByName(
                "SPARK_REMOTE",
                "unset",
                "Asks for a Spark Connect session: the writer refuses it (it needs a classic "
                "session).",
            ),
            ByName(
                "SPARK_CONNECT_MODE_ENABLED",
                "unset",
                "Likewise: a Spark Connect session, refused.",
            ),
            ByName(
                "JAVA_HOME",
                "the `java`/`javac` on the PATH",
                "The JDK whose `javac` compiles the writer's local file system classes; "
                "devstack's brokers run its `java`.",
            ),
        ],
    ),
    (
        "devstack",
        "The local stack of this repository (`devstack/`), for the demo and the tests.",
        [
            ByName("DEVSTACK_HOME", "`.devstack`", "Jars, data, logs and pid files."),
            ByName(
                "PYENV_ROOT",
                "`~/.pyenv`",
                "Where `devstack compat LINE` looks for the Python a Spark line's venv wants.",
            ),
            ByName(
                "DEVSTACK_KAFKA_PORT",
                "19092",
                "The broker's port; its controller takes the next one.",
            ),
            ByName(
                "DEVSTACK_REGISTRY_PORT",
                "18081",
                "The schema registry's port (`devstack up --registry`).",
            ),
            ByName(
                "DEVSTACK_CLUSTER_PORT",
                "19192",
                "The first port of the three-broker cluster (`devstack up --brokers 3`).",
            ),
            ByName(
                "DEVSTACK_SECURE_PORT",
                "19094",
                "The secured broker's port (`devstack up --secure`).",
            ),
            ByName(
                "DEVSTACK_SECURE_DIR",
                "`.devstack/kafka-secure`",
                "The secured broker's state, its CA and its generated dev passwords.",
            ),
            ByName(
                "AZURITE_HOME",
                "`~/.cache/flow-platform/azurite`",
                "Where Azurite, the Azure storage emulator of one test suite, is installed.",
            ),
            ByName(
                "KAFKA_BOOTSTRAP_SERVERS",
                "unset",
                "Set: the tests, the benchmarks and the demo use that cluster and start no broker.",
            ),
        ],
    ),
    (
        "Example flows and the demo",
        "Read by the flows in `flows/` and by `make demo`.",
        [
            ByName("DEMO_TPCH_SCALE", "0.01", "The demo's TPC-H scale factor."),
            ByName("DEMO_KEEP", "unset", "Set: the demo keeps its work directory."),
            ByName(
                "TPCH_SOURCE_PATH",
                "`.devstack/tpch/source.duckdb`",
                "The `tpch` flow's source database.",
            ),
            ByName("TPCH_TOPIC_PREFIX", "`tpch.`", "The `tpch` flow's topics."),
            ByName(
                "LAKEHOUSE_PATH",
                "`lakehouse`",
                "The `lakehouse` flow reads the Delta tables there (also the writer's).",
            ),
            ByName(
                "LAKEHOUSE_FLOW_TOPIC",
                "`lakehouse.revenue_by_segment`",
                "The `lakehouse` flow's topic.",
            ),
            ByName("POSTGRES_FLOW_DSN", "required", "The `postgres_flow` flow's database."),
            ByName("POSTGRES_FLOW_TOPIC_PREFIX", "`shopdb.`", "The `postgres_flow` flow's topics."),
            ByName("REST_FLOW_BASE_URL", "required", "The `rest_flow` flow's API."),
            ByName("REST_FLOW_TOPIC", "`shop_api.orders`", "The `rest_flow` flow's topic."),
            ByName("REST_FLOW_PAGE_SIZE", "100", "Rows per page the `rest_flow` flow asks for."),
            ByName("REST_FLOW_CONCURRENCY", "8", "Pages the `rest_flow` flow reads at once."),
        ],
    ),
]

_ROLE = re.compile(r":(?:class|mod|func|meth|attr|data):`~?([^`<]+?)(?:\s*<[^>]+>)?`")


def variables(settings: type[EnvSettings], field: str) -> list[str]:
    """The environment variables of one field: its alias(es), else prefix + name."""
    info = settings.model_fields[field]
    alias = info.validation_alias
    if isinstance(alias, str):
        return [alias]
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [f"{settings.model_config.get('env_prefix', '')}{field}".upper()]


def attribute_texts(settings: type) -> dict[str, str]:
    """``name -> text`` of the ``Attributes:`` section of a class docstring (Google style)."""
    doc = inspect.getdoc(settings) or ""
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    texts: dict[str, str] = {}
    current = None
    for line in section.splitlines():
        entry = re.match(r"^    (\w+): (.*)$", line)
        if entry:
            current = entry.group(1)
            texts[current] = entry.group(2)
        elif current and line.startswith("        "):
            texts[current] += " " + line.strip()
        elif line.strip():
            break
    return {name: markdown(text) for name, text in texts.items()}


def markdown(text: str) -> str:
    """Docstring markup as Markdown: ``x`` -> `x`, :class:`~a.B` -> `B`."""
    text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`").replace("|", "\\|")


def type_name(annotation: Any) -> str:
    """A reader's word for a field's type: number, whole number, text, secret, one of ..."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return type_name(args[0])
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in typing.get_args(annotation))
    if typing.get_origin(annotation) is dict:
        return "JSON object"
    names = {bool: "true/false", int: "whole number", float: "number", str: "text"}
    if annotation is SecretStr:
        return "secret"
    return names.get(annotation, str(annotation))


def default_text(info: FieldInfo) -> str:
    """The default as a reader sees it; required, computed or unset where there is none."""
    if info.default_factory is not None:
        return "see text" if info.default_factory is not dict else "`{}`"
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    if info.default == "":
        return "empty"
    if isinstance(info.default, bool):
        return "true" if info.default else "false"
    return "`" + str(info.default).replace("|", "\\|") + "`"


def settings_rows(settings: type[EnvSettings]) -> list[str]:
    """One table row per variable of a settings class."""
    texts = attribute_texts(settings)
    rows = []
    for field, info in settings.model_fields.items():
        text = texts.get(field)
        if text is None:
            raise SystemExit(f"{settings.__name__}.{field} has no text in its Attributes:")
        for name in variables(settings, field):
            rows.append(
                f"| `{name}` | {type_name(info.annotation)} | {default_text(info)} | {text} |"
            )
    return rows


def render() -> str:
    """The whole of docs/ENVIRONMENT.md."""
    lines = [
        "# Environment variables",
        "",
        "<!-- Generated by scripts/env_reference.py from the settings classes; do not edit. "
        "tests/test_environment_reference.py fails when it is out of date. -->",
        "",
        "Every variable the platform reads. Settings come from the environment or from a "
        "`.env` file in the working directory; a bad value fails with a `ConfigError` that "
        "names the variable and never shows its value. Secrets (type *secret*) are never "
        "logged.",
        "",
    ]
    header = ["| Variable | Type | Default | What it does |", "|---|---|---|---|"]
    for title, text, classes in SECTIONS:
        lines += [f"## {title}", "", text, "", *header]
        for settings in classes:
            lines += settings_rows(settings)
        lines.append("")
    lines += [
        "## Read by name",
        "",
        "Read where they are used rather than through a settings class.",
        "",
    ]
    for title, text, entries in BY_NAME:
        lines += [f"### {title}", "", text, "", "| Variable | Default | What it does |"]
        lines += ["|---|---|---|"]
        lines += [f"| `{e.name}` | {e.default} | {e.text} |" for e in entries]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the reference, or with ``--check`` say whether it is current (exit 1 if not)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is out of date: run scripts/env_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
