"""Every table the writer makes, read by delta-rs, polars and DuckDB as Spark reads it.

The real writer (``lakehouse-writer run --once``) fills two lakehouses from the same topics:
``dv`` with the defaults (deletion vectors on; two runs, the second widens a column and
merges through Spark so the tables hold deletion vectors), ``nodv`` with
``LAKEHOUSE_DELETION_VECTORS=false`` (one run). Each table is read by each reader and compared
row for row with Spark's read, or, where the reader cannot read a table feature, the reader's
refusal is asserted: the reader matrix of docs/TABLES.md, for the versions pinned in
constraints.txt (deltalake 1.6.6, polars 2.1.0, DuckDB and its delta extension 1.5.5).

Two more lakehouses take the same rows under a reader profile (``LAKEHOUSE_READERS=fabric``,
``=open``; two runs each, the second widens a column): their tables carry only the features
the profile's readers read, the tables that would need more are stopped with the feature
named, and the ``open`` tables are read by every reader here as Spark reads them.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from lakehouse_writer.cli import main
from producer_lib.schema import (
    AvroBoolean,
    AvroDate,
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    AvroTimestampMicros,
    ValueSchema,
)
from tests.support.kafka import topic_name
from tests.support.writer import T0, produce_transaction, publish_schemas

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ORDERS, MAPPED, WIDE = "SHOP/ORDERS", "SAP BW/~2FBIC~2FAZMAP", "SHOP/WIDE"
SYSTEM = ("_commits", "_rejected", "_writer_state")
TABLES = {"dv": (ORDERS, MAPPED, WIDE, *SYSTEM), "nodv": (ORDERS, MAPPED, *SYSTEM)}
# The features of a table that some reader refuses, as each table gains them (docs/TABLES.md).
FEATURES = {
    ("dv", ORDERS): {"deletionVectors"},
    ("dv", MAPPED): {"deletionVectors", "columnMapping"},
    ("dv", WIDE): {"deletionVectors", "typeWidening"},
    ("nodv", ORDERS): set(),
    ("nodv", MAPPED): {"columnMapping"},
    **{(lake, name): set() for lake in TABLES for name in SYSTEM},
}
# What each reader refuses (the versions of constraints.txt); DuckDB and Spark read them all.
REFUSES = {
    "deltalake": {"deletionVectors", "typeWidening"},  # to_pyarrow_table / _dataset
    "deltalake-sql": {"typeWidening"},  # QueryBuilder (DataFusion)
    "polars": {"columnMapping", "typeWidening"},
    "duckdb": set(),
}
# What a reader reads without an error, but with every column null: deltalake's to_pyarrow_*
# looks Parquet columns up by their names, where column mapping stores them under physical
# ones (``col-<uuid>``). Silent: the rows are all there.
READS_AS_NULLS = {"deltalake": {"columnMapping"}}
LAKE_TABLES = [(lake, name) for lake, names in TABLES.items() for name in names]
# The lakehouses written under a reader profile: the tables it stops, and the feature named.
PROFILE_STOPS = {
    "fabric": {"SHOP.WIDE": "typeWidening"},
    "open": {"SHOP.WIDE": "typeWidening", "SAP BW./BIC/AZMAP": "columnMapping"},
}


# -- the writer's tables --------------------------------------------------------------------


def _orders() -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP", doc="orders")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("NAME", AvroNVarchar(40))
    schema.add_field("REGION", AvroNVarchar(10))
    schema.add_field("AMOUNT", AvroDecimal(10, 2))
    schema.add_field("BOOKED", AvroDate())
    schema.add_field("PAID_AT", AvroTimestampMicros())
    schema.add_field("OPEN", AvroBoolean())
    schema.add_primary_key("ID")
    return schema


def _mapped() -> ValueSchema:
    """SAP names: ``/BIC/`` keeps its slashes; the space needs column mapping."""
    schema = ValueSchema("/BIC/AZMAP", "SAP BW")
    schema.add_field("/BIC/MANDT", AvroNVarchar(3), nullable=False)
    schema.add_field("ORDER NO", AvroLong(), nullable=False)
    schema.add_field("Größe", AvroNVarchar(10))
    schema.set_primary_keys("/BIC/MANDT", "ORDER NO")
    return schema


def _wide(quantity: Any) -> ValueSchema:
    schema = ValueSchema("WIDE", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("QTY", quantity)
    schema.add_primary_key("ID")
    return schema


def _order(i: int, change: str, t: int, **values: Any) -> dict[str, Any]:
    row = {
        "ID": i,
        "NAME": f"Kunde {i} ä",
        "REGION": "A" if i < 5 else "B",
        "AMOUNT": Decimal(f"{i}.25"),
        "BOOKED": date(2024, 1, 1) + timedelta(days=i),
        "PAID_AT": datetime(2024, 2, 1, 12, 30, i, tzinfo=UTC),
        "OPEN": i % 2 == 0,
        "__change_type": change,
        "__change_time": T0 + t,
    }
    return {**row, **values}


def _produce_first(bootstrap: str, topics: dict[str, str]) -> None:
    """Every row type into ORDERS, a mapped table, the narrow WIDE, a commit and poison."""
    orders = _orders()
    for name, schema in (("orders", orders), ("mapped", _mapped()), ("wide", _wide(AvroInt()))):
        publish_schemas(bootstrap, topics[name], topics["schemas"], schema)
    publish_schemas(bootstrap, topics["wide2"], topics["schemas"], _wide(AvroLong()))
    first = [_order(i, "I", 1) for i in range(1, 8)]
    commit_id = str(uuid.uuid4())
    record = {
        "commit_id": commit_id,
        "producer": "test",
        "source_system": "TEST",
        "function_name": "readers",
        "transaction_time": T0 + 1,
        "tables": [{"topic": topics["orders"], "table": "SHOP.ORDERS", "rows": 7}],
        "partitions": [
            {"topic": topics["orders"], "partition": 0, "min_offset": 0, "max_offset": 6, "rows": 7}
        ],
    }
    commit = (topics["commits"], commit_id.encode(), json.dumps(record).encode())
    produce_transaction(bootstrap, topics["orders"], orders, first, extra=[commit])
    produce_transaction(
        bootstrap,
        topics["orders"],
        orders,
        [
            _order(1, "U", 2, NAME="Kunde 1 neu"),
            _order(2, "D", 2),
            _order(8, "A", 2, REGION="A"),
            {"ID": 3, "__change_type": "X", "__change_time": T0 + 2},
            _order(4, "P", 2),
            _order(5, "B", 2, __source_rowid="r5"),
            _order(50, "U", 2, __source_rowid="r5", REGION="A"),
            _order(6, "G", 2),
        ],
    )
    produce_transaction(
        bootstrap,
        topics["orders"],
        orders,
        [
            {"ID": 0, "__change_type": "T", "__change_time": T0 + 3, "__truncate": {"REGION": "B"}},
            _order(10, "R", 3, REGION="B"),
        ],
    )
    mapped = [
        {
            "/BIC/MANDT": "100",
            "ORDER NO": n,
            "Größe": f"XL{n}",
            "__change_type": "I",
            "__change_time": T0 + 1,
        }
        for n in range(1, 5)
    ]
    produce_transaction(bootstrap, topics["mapped"], _mapped(), mapped)
    wide = [{"ID": i, "QTY": 10 * i, "__change_type": "I", "__change_time": T0 + 1} for i in (1, 2)]
    produce_transaction(bootstrap, topics["wide"], _wide(AvroInt()), wide)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topics["orders"], value=b"no header, not a change row", partition=0)
    producer.flush(30)


def _produce_second(bootstrap: str, topics: dict[str, str]) -> None:
    """Changes of rows the tables hold (deletion vectors), and QTY widened to a long."""
    produce_transaction(
        bootstrap,
        topics["orders"],
        _orders(),
        [
            _order(1, "U", 5, NAME="Kunde 1 neuer"),
            _order(7, "D", 5),
            _order(9, "I", 5),
        ],
    )
    produce_transaction(
        bootstrap,
        topics["mapped"],
        _mapped(),
        [
            {
                "/BIC/MANDT": "100",
                "ORDER NO": 2,
                "Größe": "S",
                "__change_type": "U",
                "__change_time": T0 + 5,
            },
            {"/BIC/MANDT": "100", "ORDER NO": 3, "__change_type": "D", "__change_time": T0 + 5},
        ],
    )
    produce_transaction(
        bootstrap,
        topics["wide2"],
        _wide(AvroLong()),
        [
            {"ID": 1, "QTY": 2**40, "__change_type": "U", "__change_time": T0 + 5},
            {"ID": 3, "QTY": 3, "__change_type": "I", "__change_time": T0 + 5},
        ],
    )


def _run_writer(lake: Path, topics: list[str], bootstrap: str, **env: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        argv = [
            "run",
            "--lakehouse",
            str(lake),
            "--checkpoint",
            f"{lake}_checkpoint",
            "--once",
            "--topics",
            "|".join(topics),
            "--bootstrap-servers",
            bootstrap,
        ]
        assert main(argv) == 0


@pytest.fixture(scope="module")
def lakes(spark, kafka_bootstrap, kafka_admin, tmp_path_factory) -> Iterator[dict[str, Path]]:
    """The ``dv`` and ``nodv`` lakehouses (see the module docstring); topics deleted after."""
    names = ("orders", "mapped", "wide", "wide2", "schemas", "commits")
    topics = {name: topic_name("readers", f"_{name}") for name in names}
    futures = kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()])
    for future in futures.values():
        future.result(timeout=30)
    root = tmp_path_factory.mktemp("readers")
    env = {
        "LAKEHOUSE_SCHEMAS_TOPIC": topics["schemas"],
        "LAKEHOUSE_COMMITS_TOPIC": topics["commits"],
    }
    data = [topics[name] for name in ("orders", "mapped", "commits")]
    try:
        _produce_first(kafka_bootstrap, topics)
        # Small merges on: delta-rs writes the first rows of ORDERS, WIDE and the mapped names.
        _run_writer(root / "dv", [*data, topics["wide"], topics["wide2"]], kafka_bootstrap, **env)
        _produce_second(kafka_bootstrap, topics)
        # Spark's MERGE writes deletion vectors; delta-rs (small merges) rewrites files.
        _run_writer(
            root / "dv",
            [*data, topics["wide"], topics["wide2"]],
            kafka_bootstrap,
            LAKEHOUSE_SMALL_MERGE_ROWS="0",
            **env,
        )
        _run_writer(root / "nodv", data, kafka_bootstrap, LAKEHOUSE_DELETION_VECTORS="false", **env)
        for profile in PROFILE_STOPS:  # WIDE made narrow first, then widened: stopped
            narrow, every = [*data, topics["wide"]], [*data, topics["wide"], topics["wide2"]]
            for topics_read in (narrow, every):
                _run_writer(
                    root / profile, topics_read, kafka_bootstrap, LAKEHOUSE_READERS=profile, **env
                )
        yield {name: root / name for name in ("dv", "nodv", *PROFILE_STOPS)}
    finally:
        for future in kafka_admin.delete_topics(list(topics.values())).values():
            future.result(timeout=30)


# -- readers --------------------------------------------------------------------------------


def _spark(spark: Any) -> Callable[[str], Any]:
    return lambda path: spark.read.format("delta").load(path).toArrow()


def _deltalake(path: str) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table()


def _deltalake_sql(path: str) -> Any:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    return pa.table(
        QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all()
    )


def _polars(path: str) -> Any:
    import polars

    return polars.scan_delta(path).collect().to_arrow()


def _duckdb(path: str) -> Any:
    import duckdb

    from producer_lib.staging import load_packaged_extension

    with duckdb.connect() as con:
        load_packaged_extension(con, "delta")
        quoted = path.replace("'", "''")
        return con.sql(f"SELECT * FROM delta_scan('{quoted}')").to_arrow_table()


READERS: dict[str, Callable[[str], Any]] = {
    "deltalake": _deltalake,
    "deltalake-sql": _deltalake_sql,
    "polars": _polars,
    "duckdb": _duckdb,
}


def _rows(table: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and the rows, sorted, with values made comparable across readers."""
    columns = table.to_pydict()
    rows = [tuple(_plain(v) for v in row) for row in zip(*columns.values(), strict=True)]
    return list(columns), sorted(rows, key=repr)


def _plain(value: Any) -> Any:
    """A reader's Python value as every other reader's: UTC instants, maps as sorted pairs."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, list) and all(
        isinstance(v, dict) and set(v) == {"key", "value"} for v in value
    ):
        return sorted((v["key"], v["value"]) for v in value)  # polars' maps
    if isinstance(value, list) and all(isinstance(v, tuple) for v in value):
        return sorted(value)  # pyarrow's maps
    return value


def _features(path: str) -> set[str]:
    """The table's features some reader refuses (reader features; version 2: column mapping)."""
    from deltalake import DeltaTable

    protocol = DeltaTable(path).protocol()
    found = set(protocol.reader_features or ())
    if protocol.min_reader_version == 2:
        found.add("columnMapping")
    return found & {"deletionVectors", "columnMapping", "typeWidening"}


# -- tests ----------------------------------------------------------------------------------


def test_every_table_of_the_writer_is_covered(lakes):
    for lake, names in TABLES.items():
        found = {str(p.parent.relative_to(lakes[lake])) for p in lakes[lake].rglob("_delta_log")}
        own = {f for f in found if f.startswith("_tombstones/")}  # the writer's, no reader's
        assert found - own == set(names), lake


@pytest.mark.parametrize(("lake", "name"), LAKE_TABLES, ids=[f"{k}:{n}" for k, n in LAKE_TABLES])
def test_a_table_gains_a_feature_only_when_it_needs_it(lakes, lake, name):
    assert _features(str(lakes[lake] / name)) == FEATURES[(lake, name)]


def test_the_tables_hold_deletion_vectors_and_a_widened_column(lakes, spark):
    def deletion_vectors(path: Path) -> int:
        actions = [
            json.loads(line)
            for f in sorted((path / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines()
        ]
        return sum(1 for a in actions if (a.get("add") or {}).get("deletionVector"))

    assert deletion_vectors(lakes["dv"] / ORDERS) and deletion_vectors(lakes["dv"] / MAPPED)
    ids = {r.ID for r in spark.read.format("delta").load(str(lakes["dv"] / ORDERS)).collect()}
    assert ids == {1, 4, 8, 9, 10, 50}  # I U D A X P B G T R all applied
    for lake in (lakes["dv"], lakes["nodv"]):  # mapped names, written by Spark and delta-rs
        mapped = spark.read.format("delta").load(str(lake / MAPPED)).collect()
        assert sorted((r["ORDER NO"], r["Größe"]) for r in mapped) == [
            (1, "XL1"),
            (2, "S"),
            (4, "XL4"),
        ]
    wide = spark.read.format("delta").load(str(lakes["dv"] / WIDE))
    assert dict(wide.dtypes)["QTY"] == "bigint"
    assert sorted((r.ID, r.QTY) for r in wide.collect()) == [(1, 2**40), (2, 20), (3, 3)]


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(("lake", "name"), LAKE_TABLES, ids=[f"{k}:{n}" for k, n in LAKE_TABLES])
def test_each_reader_reads_the_table_as_spark_or_refuses_a_named_feature(
    lakes, spark, lake, name, reader
):
    path = str(lakes[lake] / name)
    features = FEATURES[(lake, name)]
    refused = REFUSES[reader] & features
    expected = _rows(_spark(spark)(path))
    if refused:
        _assert_refused(reader, path, refused)
    elif READS_AS_NULLS.get(reader, set()) & features:
        columns, rows = expected
        assert _rows(READERS[reader](path)) == (columns, [(None,) * len(columns)] * len(rows))
    else:
        assert _rows(READERS[reader](path)) == expected


def _assert_refused(reader: str, path: str, features: set[str]) -> None:
    from deltalake.exceptions import DeltaError, DeltaProtocolError

    with pytest.raises((DeltaProtocolError, DeltaError)) as refusal:
        READERS[reader](path)
    # "... reader features: {'deletionVectors'} but these are not yet supported ...";
    # polars: "requires reader version 2 (column mapping)" when that is the only reader feature
    message = str(refusal.value).lower().replace(" ", "")
    assert any(f.lower() in message for f in features), message


@pytest.mark.parametrize("profile", list(PROFILE_STOPS))
def test_a_reader_profile_gives_tables_only_what_its_readers_read(lakes, spark, capsys, profile):
    from lakehouse_writer.tables.features import parse_readers, reader_policy

    lake = lakes[profile]
    allowed = reader_policy(parse_readers(profile)).allowed
    tables = sorted(str(p.parent.relative_to(lake)) for p in lake.rglob("_delta_log"))
    assert ORDERS in tables and (MAPPED in tables) is (profile == "fabric")
    for name in tables:
        assert _features(str(lake / name)) <= allowed, name
    capsys.readouterr()
    assert main(["status", "--lakehouse", str(lake), "--checkpoint", f"{lake}_checkpoint"]) == 1
    report = capsys.readouterr().out
    for table, feature in PROFILE_STOPS[profile].items():
        line = next((x for x in report.splitlines() if f"{table}:" in x), "")
        assert feature in line and profile in line, (table, report)
    if profile == "open":  # every reader here reads every table as Spark does
        for name in tables:
            expected = _rows(_spark(spark)(str(lake / name)))
            for reader, read in READERS.items():
                assert _rows(read(str(lake / name))) == expected, (name, reader)


def test_dropping_the_features_makes_an_existing_table_readable_by_all(lakes, spark, tmp_path):
    path = str(tmp_path / "WIDE")
    shutil.copytree(lakes["dv"] / WIDE, path)
    for feature in ("typeWidening", "deletionVectors"):  # docs/TABLES.md, existing tables
        spark.sql(f"ALTER TABLE delta.`{path}` DROP FEATURE {feature}")
    assert _features(path) == set()
    expected = _rows(_spark(spark)(path))
    for reader in READERS.values():
        assert _rows(reader(path)) == expected


def test_a_profile_refuses_a_setting_its_readers_cannot_read():
    from lakehouse_writer.settings import LakehouseSettings
    from producer_lib.errors import ConfigError

    assert LakehouseSettings(LAKEHOUSE_READERS="open").reader_policy.deletion_vectors is False
    with pytest.raises(ConfigError, match="LAKEHOUSE_DELETION_VECTORS=true.*readers open"):
        LakehouseSettings(LAKEHOUSE_READERS="fabric,open", LAKEHOUSE_DELETION_VECTORS="true")
    with pytest.raises(ConfigError, match="unknown readers"):
        LakehouseSettings(LAKEHOUSE_READERS="synapse")


def test_the_switch_is_a_setting_named_by_its_variable():
    from lakehouse_writer.settings import LakehouseSettings
    from producer_lib.errors import ConfigError

    assert LakehouseSettings().reader_policy.deletion_vectors is True
    off = LakehouseSettings(LAKEHOUSE_DELETION_VECTORS="false")
    assert off.reader_policy.deletion_vectors is False
    with pytest.raises(ConfigError, match="LAKEHOUSE_DELETION_VECTORS"):
        LakehouseSettings(LAKEHOUSE_DELETION_VECTORS="sometimes")


def test_off_is_written_as_false_not_left_to_the_platform(spark):
    from lakehouse_writer.tables.features import reader_policy
    from lakehouse_writer.tables.manager import table_properties

    # a Databricks workspace may turn deletion vectors on for tables that do not say "false"
    assert table_properties(_orders())["delta.enableDeletionVectors"] == "true"
    off = reader_policy((), deletion_vectors=False)
    assert table_properties(_orders(), off)["delta.enableDeletionVectors"] == "false"
