"""The row-type rules as SQL (lakehouse_writer.rules.sql): DuckDB and Spark read the same text.

Random batches of change rows of a keyed table (every row type, BEFORE images paired by row
id or by position, transactions spread over two partitions; one key column or two) go through
the MERGE source and the TRUNCATE condition in DuckDB, as the driver's engine runs it
(:class:`~lakehouse_writer.engines.delta_rs.engine.ArrowRows`), and in Spark SQL (Spark's
engine); the two must give the same rows, row for row.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from lakehouse_writer.engines.delta_rs.engine import ArrowRows
from lakehouse_writer.rules.dialect import DUCKDB, SPARK
from lakehouse_writer.rules.sql import TableShape, merge_source, truncated
from lakehouse_writer.rules.truncate import Truncate

T0 = datetime(2024, 1, 1, tzinfo=UTC)
TECHNICAL = ("__change_type", "__change_time", "__source_system", "__source_rowid", "__truncate")
SHAPE = TableShape(
    columns={
        "K1": "bigint",
        "K2": "string",
        "NOTE": "string",
        "AMT": "decimal(10,2)",
        "__change_type": "string",
        "__change_time": "timestamp",
        "__source_system": "string",
        "__source_rowid": "string",
        "__truncate": "map<string,string>",
    },
    keys=("K1",),
    technical=frozenset(TECHNICAL),
)
# The same table keyed by two columns (K2 is then part of the key, not payload).
TWO_KEYS = replace(SHAPE, keys=("K1", "K2"))
ARROW = pa.schema(
    [
        ("K1", pa.int64()),
        ("K2", pa.string()),
        ("NOTE", pa.string()),
        ("AMT", pa.decimal128(10, 2)),
        ("__change_type", pa.string()),
        ("__change_time", pa.timestamp("us", "UTC")),
        ("__source_system", pa.string()),
        ("__source_rowid", pa.string()),
        ("__truncate", pa.map_(pa.string(), pa.string())),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)


def random_batch(seed: int) -> pa.Table:
    """Transactions of 1-4 rows, each at its own change time, over two partitions."""
    rng = random.Random(seed)
    rows, offsets = [], [0, 0]
    for txn in range(rng.randint(1, 6)):
        at = T0 + timedelta(seconds=txn)
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice("IUARDXGPPB")
            part = rng.randint(0, 1)
            row = _row(rng, kind, at, part, offsets)
            rows.append(row)
            if kind == "B":  # its UPDATE: by row id anywhere, or the next message
                rowid = rng.choice([None, f"r{len(rows)}"])
                row["__source_rowid"] = rowid
                upart = part if rowid is None else rng.randint(0, 1)
                update = _row(rng, "U", at, upart, offsets)
                update["__source_rowid"] = rowid
                rows.append(update)
    return pa.Table.from_pylist(rows, schema=ARROW)


def _row(rng: random.Random, kind: str, at: datetime, part: int, offsets: list[int]) -> dict:
    offsets[part] += 1
    return {
        "K1": rng.randint(1, 3),
        "K2": rng.choice(["x", "y"]),
        "NOTE": rng.choice([None, "a", "b", "c"]),
        "AMT": rng.choice([None, Decimal("1.50"), Decimal("2.25")]),
        "__change_type": kind,
        "__change_time": at,
        "__source_system": "S",
        "__source_rowid": None,
        "__truncate": None,
        "topic": "t",
        "partition": part,
        "offset": offsets[part],
    }


def _duckdb(query: Callable[[str], str], rows: pa.Table) -> list[tuple]:
    """``query`` of the rows' relation, run as the delta-rs engine runs its rules."""
    held = ArrowRows.of(rows)
    try:
        found = held.arrow(query(held.sql))
    finally:
        held.close()
    return sorted((tuple(r.values()) for r in found.to_pylist()), key=repr)


def _normal(row: tuple) -> tuple:
    """A row as both engines show it: maps as sorted pairs, timestamps in UTC."""
    out = []
    for value in row:
        if isinstance(value, dict):
            value = sorted(value.items())
        elif isinstance(value, list) and value and isinstance(value[0], tuple):
            value = sorted(value)
        elif isinstance(value, datetime):
            value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        out.append(value)
    return tuple(out)


@pytest.mark.parametrize("shape", [SHAPE, TWO_KEYS], ids=["one_key", "two_keys"])
@pytest.mark.parametrize("seed", range(40))
def test_duckdb_merge_source_holds_one_row_per_key(seed, shape):
    rows = random_batch(seed)
    found = _duckdb(lambda r: merge_source(r, shape, rows.column_names, DUCKDB, cast=False), rows)
    keys = [r[: len(shape.keys)] for r in found]
    assert len(keys) == len(set(keys))
    actions = {r[-2] for r in found}
    assert actions <= {"upsert", "delete", "archive", "upsert_archive", "delete_archive"}


def test_a_before_image_deletes_its_old_key_only_when_the_update_moved_it():
    rows = pa.Table.from_pylist(
        [
            _fixed(1, "B", 0, 1, rowid="x"),
            _fixed(2, "U", 0, 2, rowid="x"),  # moved 1 -> 2
            _fixed(3, "B", 0, 3),
            _fixed(3, "U", 0, 4),  # same key, by position
        ],
        schema=ARROW,
    )
    found = _duckdb(lambda r: merge_source(r, SHAPE, rows.column_names, DUCKDB, cast=False), rows)
    assert [(r[0], r[-2]) for r in found] == [(1, "delete"), (2, "upsert"), (3, "upsert")]


def _fixed(k: int, kind: str, part: int, offset: int, rowid: str | None = None) -> dict:
    return {
        "K1": k,
        "K2": "x",
        "NOTE": f"n{offset}",
        "AMT": None,
        "__change_type": kind,
        "__change_time": T0,
        "__source_system": "S",
        "__source_rowid": rowid,
        "__truncate": None,
        "topic": "t",
        "partition": part,
        "offset": offset,
    }


TRUNCATES = [
    Truncate(int((T0 - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) + 2_000_000),
    Truncate(
        int((T0 - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) + 4_000_000,
        {"note": "a", "AMT": "1.50"},
    ),
    Truncate(
        int((T0 - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) + 9_000_000,
        {"NOTE": None},
    ),
]


@pytest.mark.spark
@pytest.mark.parametrize("shape", [SHAPE, TWO_KEYS], ids=["one_key", "two_keys"])
@pytest.mark.parametrize("seed", range(12))
def test_spark_and_duckdb_give_the_same_merge_source(spark, seed, shape):
    rows = random_batch(seed)
    frame = spark.createDataFrame(rows)
    view = f"rows_{seed}"
    frame.createOrReplaceTempView(view)
    try:
        in_spark = spark.sql(merge_source(view, shape, frame.columns, SPARK)).collect()
        truncated_spark = spark.sql(
            f"SELECT offset, partition FROM {view} WHERE {truncated(TRUNCATES, SHAPE, SPARK)}"
        ).collect()
    finally:
        spark.catalog.dropTempView(view)
    in_duckdb = _duckdb(
        lambda r: merge_source(r, shape, rows.column_names, DUCKDB, cast=False), rows
    )
    assert sorted((_normal(tuple(r)) for r in in_spark), key=repr) == sorted(
        (_normal(r) for r in in_duckdb), key=repr
    )
    where = truncated(TRUNCATES, SHAPE, DUCKDB)
    truncated_duckdb = _duckdb(
        lambda r: f'SELECT "offset", "partition" FROM {r} WHERE {where}', rows
    )
    assert sorted(tuple(r) for r in truncated_spark) == truncated_duckdb
