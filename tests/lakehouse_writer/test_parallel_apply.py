"""Tables of one batch applied at the same time: each keeps its own exactly-once txn ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse_writer.engines import ids
from lakehouse_writer.engines.spark import txn
from lakehouse_writer.engines.spark.engine import apply_batch
from lakehouse_writer.runtime.parallel import DEFAULT_WORKERS, TableApplier, on_session
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.tables.manager import TableManager
from producer_lib.errors import ConfigError
from tests.support.writer import rows_df, sample_schema, table_rows

pytestmark = pytest.mark.spark

TABLES = 6


def _txns(path: str) -> list[tuple[int, str, int]]:
    """(table version, appId, txnVersion) of every ``txn`` action in the table's log."""
    found = []
    for log_file in sorted((Path(path) / "_delta_log").glob("[0-9]*.json")):
        for line in log_file.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found.append((int(log_file.stem), action["txn"]["appId"], action["txn"]["version"]))
    return found


@pytest.mark.slow
def test_concurrent_merges_commit_each_tables_own_txn_ids_and_replays_change_nothing(
    spark, tmp_path
):
    manager = TableManager(spark, str(tmp_path / "lake"))
    schemas = [sample_schema(name=f"T{i}") for i in range(TABLES)]
    with TableApplier(spark, workers=4) as applier:
        manager.ensure_all(schemas, applier)
        tables = [manager.ensure(s) for s in schemas]

        def batch(batch_id, rows_of):
            def one(i, session):
                rows = on_session(rows_df(spark, schemas[i], rows_of(i)), session)
                return apply_batch(rows, batch_id, tables[i], "w1")

            outcomes = applier.map(one, list(range(TABLES)))
            assert [o.error for o in outcomes] == [None] * TABLES
            return [o.result for o in outcomes]

        batch(
            0,
            lambda i: [
                {"ID": k, "NAME": f"t{i}-{k}", "__change_type": "I", "t": 1} for k in range(5)
            ],
        )
        changes = lambda i: [  # noqa: E731 - the same rows again for the replay
            {"ID": 1, "NAME": f"t{i}-new", "__change_type": "U", "t": 2},
            {"ID": 2, "__change_type": "D", "t": 2},
        ]
        merged = batch(1, changes)
        replayed = batch(1, changes)  # a replay after a crash: every MERGE is skipped

    assert spark.conf.get(txn.TXN_APP_ID, None) is None  # no txn conf left on the session
    for i, table in enumerate(tables):
        assert table_rows(spark, table.path) == [
            (0, f"t{i}-0"),
            (1, f"t{i}-new"),
            (3, f"t{i}-3"),
            (4, f"t{i}-4"),
        ]
        app_id = ids.app_id_for("w1", table.ref.qualified)
        last = _txns(table.path)[-1]
        assert last == (merged[i].version, app_id, ids.txn_version(1, ids.STEP_ROWS))
        assert replayed[i].version == merged[i].version  # nothing committed by the replay
        assert all(a == app_id for _, a, _ in _txns(table.path))  # no other table's ids


@pytest.mark.slow
def test_every_table_runs_and_errors_come_back_in_table_order(spark):
    def apply(item, session):
        if item == 2:
            raise RuntimeError("table 2 failed")
        return session.range(item).count()

    with TableApplier(spark, workers=3) as applier:
        outcomes = applier.map(apply, [1, 2, 3, 4])
    assert [o.item for o in outcomes] == [1, 2, 3, 4]
    assert [o.result for o in outcomes] == [1, None, 3, 4]
    assert [str(o.error) if o.error else None for o in outcomes] == [
        None,
        "table 2 failed",
        None,
        None,
    ]


def test_workers_come_from_the_environment_and_a_bad_value_is_refused(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.delenv("LAKEHOUSE_APPLY_WORKERS", raising=False)
    assert LakehouseSettings().apply_workers == DEFAULT_WORKERS == 4
    monkeypatch.setenv("LAKEHOUSE_APPLY_WORKERS", "8")
    assert LakehouseSettings().apply_workers == 8
    monkeypatch.setenv("LAKEHOUSE_APPLY_WORKERS", "zero-ish")
    with pytest.raises(ConfigError, match="LAKEHOUSE_APPLY_WORKERS") as caught:
        LakehouseSettings()
    assert "zero-ish" not in str(caught.value)


@pytest.mark.slow
def test_rows_decoded_once_can_be_planned_from_many_threads_at_once(spark):
    """PySpark's from_avro options map is built by one shared builder: threads raced on it."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    import fastavro
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from lakehouse_writer.read.framing import avro_struct

    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    values = []
    for a in range(40):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, {"a": a})
        values.append((buf.getvalue(),))
    frame = spark.createDataFrame([*values, (b"\xff\xff",)], "value binary")
    decoded = frame.select(avro_struct(F.col("value"), json.dumps(schema)).alias("r"))
    plain = frame.select(from_avro("value", json.dumps(schema), {"mode": "PERMISSIVE"}).alias("r"))
    assert decoded.collect() == plain.collect()  # the same rows, bad bytes as null fields

    def plan(i):  # each thread plans (canonicalizes) its own query over the same expression
        return decoded.filter(F.col("r.a") % 8 == i).count()

    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(plan, [i % 8 for i in range(32)]))
    assert counts == [5] * 32  # 40 values: 5 of each remainder
