"""History tables (SCD type 2) through the writer's router, on real Spark and Delta tables.

A value schema that asks for history (``set_history("scd2")``) gets a table of versions: the
router gives it to Spark (delta-rs declines it), each batch is one MERGE (a replay writes
nothing), TRUNCATEs close versions, a GDPR delete leaves no version of its key and no current
data file holding one, and the current versions equal the current-row table fed the same
batches; Spark's SQL and the driver's DuckDB compute the same MERGE source. The rules' SQL
meets the model (``tests/support/history_model.py``) on random changes in DuckDB
(test_history_rules.py), and the writer in the reference model (test_reference_model.py).
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
import pytest

from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.engines.spark.engine import shape_of
from lakehouse_writer.engines.spark.history import DriverHistory
from lakehouse_writer.errors import SchemaEvolutionError
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.rules.dialect import SPARK
from lakehouse_writer.rules.history import history_source, stored_versions
from lakehouse_writer.runtime.lines import to_arrow
from lakehouse_writer.tables.manager import TableManager
from producer_lib.errors import SchemaError
from tests.support.writer import T0, rows_df, sample_schema, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

S = 1_000_000  # µs: the rows' ``t`` is µs after T0
KINDS = {"I": "upsert", "U": "upsert", "A": "upsert", "P": "archive", "D": "delete", "G": "erase"}


def _history_schema(name: str = "ORDERS"):
    schema = sample_schema(name)
    schema.set_history("scd2")
    return schema


@pytest.fixture
def lake(spark, tmp_path):
    """apply(rows, batch_id) applies rows to a history table and a current-row table of the
    same schema, through the router (delta-rs on, as the writer runs)."""
    manager = TableManager(spark, str(tmp_path))
    history = manager.ensure(_history_schema())
    plain = manager.ensure(sample_schema("ORDERS_NOW"))
    router = Router(DeltaRsWrites(), str(tmp_path), 0, "w1")

    def apply(rows, batch_id):
        engines = []
        for table in (history, plain):
            data = TableRows(table, rows_df(spark, _history_schema(), rows))
            chosen = router.engine_for(data, len(rows))
            engines.append(router.apply(data, batch_id, (), spark, chosen).engine)
        return engines[0]

    return apply, history, plain


def _versions(spark: Any, path: str) -> list[tuple[Any, ...]]:
    """(ID, NAME, change type, valid from, valid to, current) by key and valid-from; times in
    seconds after T0."""
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(path)
    found = frame.select(
        "ID",
        "NAME",
        "__change_type",
        ((F.unix_micros("__valid_from") - T0) / S).cast("long"),
        ((F.unix_micros("__valid_to") - T0) / S).cast("long"),
        "__is_current",
    ).collect()
    return sorted((tuple(r) for r in found), key=lambda r: (r[0], r[3]))


def _source_by_spark(spark: Any, table: Any, rows: list[dict]) -> list[tuple]:
    """The MERGE source of ``rows`` as Spark computes it for a large batch (Spark's SQL)."""
    frame = rows_df(spark, _history_schema(), rows)
    shape = shape_of(table)
    stored = spark.sql(
        stored_versions("{target}", "{rows}", shape, SPARK),
        target=spark.read.format("delta").load(table.path),
        rows=frame,
    )
    sql = history_source("{rows}", "{stored}", shape, frame.columns, SPARK)
    return _sorted(spark.sql(sql, rows=frame, stored=stored).collect())


def _source_in_driver(spark: Any, table: Any, rows: list[dict]) -> list[tuple]:
    """The same computed in DuckDB, as the writer does for a small batch."""
    frame = rows_df(spark, _history_schema(), rows)
    candidates = to_arrow(spark.read.format("delta").load(table.path))
    found = DriverHistory().source(
        spark, to_arrow(frame), candidates, shape_of(table), frame.columns, before=True
    )
    assert found is not None
    return _sorted(found.collect())


def _sorted(rows: list[Any]) -> list[tuple]:
    return sorted(tuple(str(v) for v in r) for r in rows)


def _current(spark: Any, path: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(path).where("__is_current")
    return sorted(tuple(r) for r in frame.select("ID", "NAME").collect())


def test_versions_of_updates_late_rows_archives_deletes_and_a_replay(spark, lake):
    from delta.tables import DeltaTable

    apply, history, plain = lake
    assert (
        apply([{"ID": i, "NAME": f"n{i}", "__change_type": "I", "t": 1 * S} for i in range(3)], 0)
        == "spark"
    )
    apply(
        [
            {"ID": 0, "NAME": "u5", "__change_type": "U", "t": 5 * S},
            {"ID": 1, "NAME": "n1", "__change_type": "D", "t": 4 * S},
        ],
        1,
    )
    late = [
        {"ID": 0, "NAME": "u3", "__change_type": "U", "t": 3 * S},  # between two versions
        {"ID": 2, "NAME": "p", "__change_type": "P", "t": 6 * S},  # keeps n2's payload
    ]
    assert _source_by_spark(spark, history, late) == _source_in_driver(spark, history, late)
    apply(late, 2)
    versions = DeltaTable.forPath(spark, history.path).history().count()
    apply(late, 2)  # a replay
    assert DeltaTable.forPath(spark, history.path).history().count() == versions
    assert _versions(spark, history.path) == [
        (0, "n0", "I", 1, 3, False),
        (0, "u3", "U", 3, 5, False),
        (0, "u5", "U", 5, None, True),
        (1, "n1", "I", 1, 4, False),
        (2, "n2", "I", 1, 6, False),
        (2, "n2", "P", 6, None, True),
    ]
    assert _current(spark, history.path) == table_rows(spark, plain.path)


def test_a_truncate_closes_versions_and_a_gdpr_delete_leaves_no_version_in_any_file(
    spark, lake, tmp_path
):
    apply, history, plain = lake
    apply(
        [
            {
                "ID": i,
                "NAME": f"secret{i}",
                "__change_type": "I",
                "t": 1 * S,
                "REGION": "A" if i else "B",
            }
            for i in range(3)
        ],
        0,
    )
    apply([{"ID": 1, "NAME": "secret1-2", "__change_type": "U", "t": 2 * S, "REGION": "A"}], 1)
    reload = [  # a scoped REPLACE of region A at 4: key 2 is not sent again
        {"ID": 9, "__change_type": "T", "t": 4 * S, "__truncate": {"REGION": "A"}},
        {"ID": 1, "NAME": "again", "__change_type": "I", "t": 4 * S, "REGION": "A"},
    ]
    apply(reload, 2)
    apply([{"ID": 1, "NAME": "x", "__change_type": "G", "t": 5 * S, "REGION": "A"}], 3)
    assert _versions(spark, history.path) == [
        (0, "secret0", "I", 1, None, True),
        (2, "secret2", "I", 1, 4, False),
    ]
    assert _current(spark, history.path) == table_rows(spark, plain.path)
    from deltalake import DeltaTable

    names = set()
    for uri in DeltaTable(history.path).file_uris():
        names |= set(pq.read_table(uri.removeprefix("file://")).column("NAME").to_pylist())
    assert not names & {"secret1", "secret1-2", "again"}, "a current file holds an erased version"


def test_a_schema_asks_for_history_once_and_with_a_key(spark, tmp_path):
    manager = TableManager(spark, str(tmp_path))
    manager.ensure(sample_schema())
    with pytest.raises(SchemaEvolutionError, match="history changed"):
        TableManager(spark, str(tmp_path)).ensure(_history_schema())
    keyless = sample_schema("LOG", keyed=False)
    keyless.set_history("scd2")
    with pytest.raises(SchemaError, match="needs a primary key"):
        keyless.to_avro_json()
