"""The postgres flow on a real PostgreSQL and the real broker: snapshot, deltas with deletes."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from datetime import datetime
from types import SimpleNamespace

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from flows.postgres_flow import PostgresOrdersFlow, create_demo_schema
from producer_lib import RunFailed, ValueSchema
from producer_lib.cli import main
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from tests.support.consume import consume_all
from tests.support.decode import decoded_values

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


CHANGES = """
UPDATE shop.orders SET status = 'shipped' WHERE order_id IN (3, 4);
INSERT INTO shop.customers (customer_id, name) VALUES (6, 'New customer');
UPDATE shop.customers SET country = 'BE' WHERE customer_id = 2;
INSERT INTO shop.orders (order_id, customer_id, amount, status) VALUES (21, 6, 99.99, 'placed');
DELETE FROM shop.orders WHERE order_id IN (5, 6);
-- deleted and written again: an UPSERT, not an EXTERMINATE
INSERT INTO shop.orders (order_id, customer_id, amount, status) VALUES (6, 1, 1.00, 'placed');
"""


@pytest.fixture
def shop(monkeypatch, postgres_dsn, kafka_bootstrap, kafka_admin):
    """A fresh ``shop`` schema, own topics and an own dataflow (own pointer) per test."""
    create_demo_schema(postgres_dsn)
    prefix = f"t_pgflow_{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("KAFKA_TOPIC_PARTITIONS", "2")
    monkeypatch.setenv("POSTGRES_FLOW_DSN", postgres_dsn)
    monkeypatch.setenv("POSTGRES_FLOW_TOPIC_PREFIX", prefix)
    yield SimpleNamespace(
        dsn=postgres_dsn,
        prefix=prefix,
        bootstrap=kafka_bootstrap,
        dataflow=f"test_{uuid.uuid4().hex[:8]}",
    )
    topics = [prefix + table for table in ("customers", "orders")]
    created = [t for t in topics if t in kafka_admin.list_topics(timeout=10).topics]
    for future in (kafka_admin.delete_topics(created) if created else {}).values():
        future.result(timeout=30)


def run(shop: SimpleNamespace, load: str):
    return asyncio.run(PostgresOrdersFlow().run(load, dataflow=shop.dataflow))


def source(dsn: str, sql: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


def published(shop: SimpleNamespace, table: str) -> list[dict]:
    return decoded_values(shop.bootstrap, shop.prefix + table)


def newest_stamp(dsn: str) -> str:
    (stamp,) = source(
        dsn,
        "SELECT greatest((SELECT max(updated_at) FROM shop.customers), "
        "(SELECT max(updated_at) FROM shop.orders), "
        "(SELECT max(deleted_at) FROM shop.orders_deleted))",
    )[0]
    return stamp


def value_schema(shop: SimpleNamespace, table: str) -> ValueSchema:
    records = [json.loads(m.value()) for m in consume_all(shop.bootstrap, "_flow_schemas")]
    (schema,) = {
        json.dumps(r["schema"])
        for r in records
        if r["topic"] == shop.prefix + table and r["kind"] == "value"
    }
    return ValueSchema.from_avro_json(schema)


def test_initial_load_is_one_snapshot_with_keys_and_comments_from_the_catalog(shop):
    result = run(shop, "initial")
    assert result.rows == {"shopdb.customers": 6, "shopdb.orders": 21}  # + one TRUNCATE each
    assert len(result.commit_ids) == 1
    assert datetime.fromisoformat(result.delta_pointer) == newest_stamp(shop.dsn)

    orders = published(shop, "orders")
    assert Counter(v["__change_type"] for v in orders) == {"T": 1, "R": 20}
    assert {v["order_id"] for v in orders if v["__change_type"] == "R"} == set(range(1, 21))
    customers = published(shop, "customers")
    assert {v["__change_time"] for v in orders + customers} == {orders[0]["__change_time"]}

    schema = value_schema(shop, "orders")
    assert schema.pks == ("order_id",)
    assert [(fk.columns, fk.ref_table) for fk in schema.foreign_keys] == [
        (("customer_id",), "customers")
    ]
    assert schema.doc == "Orders of the web shop, one row per order"
    assert schema.field("amount").doc == "Order total in EUR"


def test_delta_publishes_exactly_the_changes_and_deletes_then_nothing(shop):
    initial = run(shop, "initial")
    source(shop.dsn, CHANGES)
    delta = run(shop, "delta")
    assert delta.rows == {"shopdb.customers": 2, "shopdb.orders": 5}
    moved = datetime.fromisoformat(delta.delta_pointer)
    assert moved == newest_stamp(shop.dsn) > datetime.fromisoformat(initial.delta_pointer)

    changes = [v for v in published(shop, "orders") if v["__change_type"] in "AX"]
    by_type = {t: {v["order_id"]: v for v in changes if v["__change_type"] == t} for t in "AX"}
    assert set(by_type["A"]) == {3, 4, 6, 21} and set(by_type["X"]) == {5}
    assert by_type["A"][3]["status"] == "shipped" and by_type["A"][6]["amount"] == 1
    assert by_type["X"][5]["customer_id"] is None  # only the key of a deleted row is known
    customers = [v for v in published(shop, "customers") if v["__change_type"] == "A"]
    assert {(v["customer_id"], v["country"]) for v in customers} == {(2, "BE"), (6, None)}

    key = f"postgres_orders|{shop.dataflow}|0".encode()
    logged = [
        json.loads(m.value())
        for m in consume_all(shop.bootstrap, EXECUTION_LOG_TOPIC)
        if m.key() == key
    ][-1]
    assert (logged["status"], logged["delta_pointer"]) == ("COMPLETED", delta.delta_pointer)
    assert (logged["commit_id"], logged["rows"]) == (delta.commit_id, delta.rows)

    again = run(shop, "delta")
    assert (again.rows, again.delta_pointer, again.commit_id) == ({}, delta.delta_pointer, None)
    assert len(published(shop, "orders")) == 21 + 5


def test_a_transaction_that_commits_late_is_not_missed(shop):
    run(shop, "initial")
    with psycopg.connect(shop.dsn) as late:  # starts its transaction (and stamp) first ...
        late.execute("UPDATE shop.orders SET status = 'late' WHERE order_id = 7")
        source(shop.dsn, "UPDATE shop.orders SET status = 'early' WHERE order_id = 8")
        held = run(shop, "delta")  # ... so the delta waits for it, and for what came after
        assert held.rows == {}
        late.commit()
    delta = run(shop, "delta")
    changes = [v for v in published(shop, "orders") if v["__change_type"] == "A"]
    assert {v["order_id"]: v["status"] for v in changes} == {7: "late", 8: "early"}
    assert delta.rows == {"shopdb.orders": 2}


def test_the_command_line_runs_the_flow(shop, monkeypatch):
    args = ["run", "flows.postgres_flow:PostgresOrdersFlow", "--dataflow", shop.dataflow]
    assert main([*args, "--load", "initial"]) == 0
    assert Counter(v["__change_type"] for v in published(shop, "customers")) == {"T": 1, "R": 5}
    monkeypatch.delenv("POSTGRES_FLOW_DSN")
    assert main([*args, "--load", "delta"]) == 2  # configuration error: nothing ran


def test_a_user_who_cannot_see_other_sessions_gets_a_clear_error(shop, monkeypatch):
    source(shop.dsn, "DROP ROLE IF EXISTS flow_unprivileged; CREATE ROLE flow_unprivileged LOGIN")
    monkeypatch.setenv("POSTGRES_FLOW_DSN", make_conninfo(shop.dsn, user="flow_unprivileged"))
    with pytest.raises(RunFailed, match="GRANT pg_read_all_stats"):
        run(shop, "initial")
    source(shop.dsn, "DROP ROLE flow_unprivileged")


def test_openlineage_names_the_postgres_tables_by_the_naming_spec(shop, monkeypatch):
    """The events of a PostgresReader flow: postgres://host:port, database.schema.table."""
    from psycopg.conninfo import conninfo_to_dict

    from tests.support.openlineage import LineageReceiver, check_run_event

    dsn = conninfo_to_dict(shop.dsn)
    with LineageReceiver().running() as receiver:
        monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)
        result = run(shop, "initial")

    start, complete = receiver.of_run(result.run_id)
    check_run_event(start)
    check_run_event(complete)
    namespace = f"postgres://{dsn['host']}:{dsn['port']}"
    names = {(d["namespace"], d["name"]) for d in complete["inputs"]}
    assert names == {(namespace, f"{dsn['dbname']}.shop.{t}") for t in ("customers", "orders")}
    assert (complete["job"]["namespace"], complete["job"]["name"]) == (
        "SHOPDB",
        f"postgres_orders.{shop.dataflow}",
    )
    orders = next(d for d in complete["outputs"] if d["name"] == f"{shop.prefix}orders")
    inputs = orders["facets"]["columnLineage"]["fields"]["order_id"]["inputFields"]
    assert [(i["namespace"], i["name"], i["field"]) for i in inputs] == [
        (namespace, f"{dsn['dbname']}.shop.orders", "order_id")
    ]
