"""The tpch flow against the real broker: initial snapshot, then a delta of the source's changes."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import duckdb
import pytest

from flows.tpch import TpchFlow
from flows.tpch_source import TABLES, apply_changes, create_source
from tests.support.consume import consume_all
from tests.support.decode import decoded_values

pytestmark = pytest.mark.kafka


@pytest.fixture
def tpch_env(monkeypatch, tmp_path, kafka_bootstrap):
    source = tmp_path / "source.duckdb"
    create_source(source, scale_factor=0.01)  # below 0.01 dbgen repeats partsupp keys
    prefix = f"t_tpch_{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TPCH_SOURCE_PATH", str(source))
    monkeypatch.setenv("TPCH_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("KAFKA_TOPIC_PARTITIONS", "2")
    return {"source": source, "prefix": prefix, "bootstrap": kafka_bootstrap}


def source_counts(path) -> dict[str, int]:
    with duckdb.connect(str(path), read_only=True) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


@pytest.mark.slow  # 4 s: keeps the fast suite under 5 minutes
def test_initial_load_publishes_every_table_as_one_snapshot(tpch_env):
    result = asyncio.run(TpchFlow().run("initial"))
    counts = source_counts(tpch_env["source"])
    assert result.rows == {f"tpch.{t}": n + 1 for t, n in counts.items()}  # + the TRUNCATE
    assert len(set(result.commit_ids)) == 1 and result.delta_pointer == 0
    orders = decoded_values(tpch_env["bootstrap"], f"{tpch_env['prefix']}orders")
    assert Counter(v["__change_type"] for v in orders) == {"T": 1, "R": counts["orders"]}
    assert len({v["__change_time"] for v in orders}) == 1  # one transaction, one time


@pytest.mark.slow
def test_delta_load_publishes_exactly_the_changes_since_the_pointer(tpch_env):
    asyncio.run(TpchFlow().run("initial"))
    summary = apply_changes(tpch_env["source"], updated=12, added=5, deleted=3)
    delta = asyncio.run(TpchFlow().run("delta"))
    assert delta.delta_pointer == 3  # three change batches logged
    assert delta.rows["tpch.orders"] == 12 + 5 + 3
    assert delta.rows["tpch.lineitem"] == summary.lineitems_changed

    orders = decoded_values(tpch_env["bootstrap"], f"{tpch_env['prefix']}orders")
    changes = [v for v in orders if v["__change_type"] in "IUD"]
    assert Counter(v["__change_type"] for v in changes) == {"U": 12, "I": 5, "D": 3}
    assert all(v["o_comment"] == "new order" for v in changes if v["__change_type"] == "I")
    assert all(v["o_comment"] == "revised" for v in changes if v["__change_type"] == "U")
    with duckdb.connect(str(tpch_env["source"]), read_only=True) as con:
        gone = {k for (k,) in con.execute("SELECT o_orderkey FROM deleted_orders").fetchall()}
    assert {v["o_orderkey"] for v in changes if v["__change_type"] == "D"} == gone

    again = asyncio.run(TpchFlow().run("delta"))  # nothing changed since: nothing to publish
    assert (again.rows, again.delta_pointer) == ({}, 3)
    assert len(consume_all(tpch_env["bootstrap"], f"{tpch_env['prefix']}orders")) == len(orders)
