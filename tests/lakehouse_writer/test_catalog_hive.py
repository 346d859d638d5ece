"""Tables found by name in a real Hive metastore (embedded Derby), from other processes.

Four JVMs, one after the other (embedded Derby takes one at a time): a writer without a
catalog, ``lakehouse-writer rebuild`` of one table with ``LAKEHOUSE_CATALOG=spark_catalog``
(it registers the table it makes again), the writer restarted with that catalog, then
Spark's Thrift server (HiveServer2) on the same metastore, another process with its own
session, queried over Thrift by PyHive (:mod:`tests.support.thrift_server`) as a BI tool
would: every table found by name, rows, columns, comments, properties and locations.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyhive import hive

from producer_lib.schema import AvroNVarchar
from tests.support.thrift_server import hive_conf, thrift_server
from tests.support.writer import T0, produce_transaction, publish_schemas, sample_schema

WRITER = str(Path(sys.executable).parent / "lakehouse-writer")


def _writer(work: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WRITER, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )


def _rows(ids: range, **more: object) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + i, **more}
        for i in ids
    ]


def _over_hiveserver2(port: int) -> dict[str, object]:
    """What a HiveServer2 client finds: tables, rows by name, ``DESCRIBE TABLE EXTENDED``."""
    with hive.connect(host="127.0.0.1", port=port, auth="NOSASL") as connection:
        cursor = connection.cursor()

        def query(sql: str) -> list[tuple]:
            cursor.execute(sql)
            return cursor.fetchall()

        described = query("DESCRIBE TABLE EXTENDED shop.orders")
        schemas = sorted(r[0] for r in query("SHOW SCHEMAS"))
        return {
            "tables": {ns: sorted(r[1] for r in query(f"SHOW TABLES IN `{ns}`")) for ns in schemas},
            "orders": sorted(query("SELECT ID, STATUS FROM shop.orders")),
            "early": sorted(r[0] for r in query("SELECT ID FROM shop.early")),
            "kunden": sorted(r[0] for r in query("SELECT ID FROM shop.kunden_")),
            "rejected": query("SELECT count(*) FROM lakehouse_system._rejected")[0][0],
            "state_columns": [r[0] for r in query("DESCRIBE lakehouse_system._writer_state")],
            "columns": {r[0]: r[2] for r in described[: [r[0] for r in described].index("")]},
            "detail": {r[0]: r[1] for r in described if r[0] and not r[0].startswith("#")},
        }


@pytest.mark.slow
@pytest.mark.kafka
def test_a_writer_registers_its_tables_and_another_process_finds_them_by_name(
    kafka_bootstrap, new_topic, tmp_path
):
    orders, early = sample_schema(), sample_schema("EARLY")
    kunden = sample_schema("KUNDEN$")
    schemas = new_topic(suffix="_schemas")
    topics = {name: new_topic(suffix=f"_{name}") for name in ("orders", "early", "kunden")}
    publish_schemas(kafka_bootstrap, topics["orders"], schemas, orders)
    publish_schemas(kafka_bootstrap, topics["early"], schemas, early)
    produce_transaction(kafka_bootstrap, topics["orders"], orders, _rows(range(1, 4)))
    produce_transaction(kafka_bootstrap, topics["early"], early, _rows(range(1, 3)))
    work, meta = tmp_path / "work", tmp_path / "meta"
    work.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "LOG_"))},
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "LAKEHOUSE_SCHEMAS_TOPIC": schemas,
        "LAKEHOUSE_MONITOR_GROUP": "off",
    }
    if "LAKEHOUSE_JARS_DIR" in os.environ:
        env["LAKEHOUSE_JARS_DIR"] = os.environ["LAKEHOUSE_JARS_DIR"]
    lake = work / "lake"
    where = ["--lakehouse", str(lake), "--checkpoint", str(work / "ckpt")]
    regex = "|".join(topics.values())

    before = _writer(work, env, "run", *where, "--once", "--topics", regex)  # no catalog yet
    assert before.returncode == 0, before.stderr[-3000:]
    assert "table registered" not in before.stderr

    # Then a catalog. A command that makes a table again registers it, as the writer would.
    conf = [f"--conf={k}={v}" for k, v in hive_conf(str(meta)).items() if "catalogImpl" not in k]
    env_catalog = {**env, "LAKEHOUSE_CATALOG": "spark_catalog"}
    rebuilt = _writer(
        work,
        {**env_catalog, "LOG_LEVEL": "INFO"},
        "rebuild",
        "--table",
        "SHOP.EARLY",
        *where,
        *conf,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "table registered table=SHOP.EARLY name=spark_catalog.shop.early" in rebuilt.stderr

    # ORDERS gains a column, a new table and a rejected row arrive.
    evolved = sample_schema()
    evolved.add_field("STATUS", AvroNVarchar(10), doc="order status")
    publish_schemas(kafka_bootstrap, topics["orders"], schemas, evolved)
    publish_schemas(kafka_bootstrap, topics["kunden"], schemas, kunden)
    produce_transaction(
        kafka_bootstrap, topics["orders"], evolved, _rows(range(4, 6), STATUS="new")
    )
    produce_transaction(kafka_bootstrap, topics["kunden"], kunden, _rows(range(7, 9)))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topics["orders"], value=b"no header: rejected", partition=0)
    producer.flush(30)
    after = _writer(work, env_catalog, "run", *where, "--once", "--topics", regex, *conf)
    assert after.returncode == 0, after.stderr[-3000:]
    assert "table registered table=SHOP.EARLY name=spark_catalog.shop.early" in after.stderr
    registered_at_start = after.stderr.index("tables registered at start")
    evolved_at = after.stderr.index("column added table=SHOP.ORDERS column=STATUS")
    assert after.stderr.index("table registered table=SHOP.ORDERS") < registered_at_start
    assert registered_at_start < evolved_at  # the column came after the registration

    system_dirs = sorted(  # the system tables (rebuild leaves its empty `_rebuild` folder)
        p.name for p in lake.iterdir() if p.name.startswith("_") and (p / "_delta_log").is_dir()
    )
    assert {"_rejected", "_writer_state"} <= set(system_dirs)

    # Another process, a HiveServer2 client (PyHive over Thrift) on Spark's Thrift server, on
    # the same metastore: every table by name, as a BI tool finds it.
    with thrift_server(str(meta), work, env) as port:
        served = _over_hiveserver2(port)
    assert served["tables"] == {
        "default": [],
        "lakehouse_system": system_dirs,
        "shop": ["early", "kunden_", "orders"],
    }
    assert served["orders"] == [(1, None), (2, None), (3, None), (4, "new"), (5, "new")]
    assert served["early"] == [1, 2] and served["kunden"] == [7, 8]
    assert served["rejected"] == 1
    assert "instance" in served["state_columns"]
    assert served["columns"]["ID"] == "order id" and served["columns"]["NAME"] == "customer name"
    assert served["columns"]["STATUS"] == "order status"  # evolved, never registered again
    assert served["detail"]["Comment"] == "orders of the shop"
    assert "flow.owner_email=owner@example.com" in served["detail"]["Table Properties"]
    assert 'flow.primary_keys=["ID"]' in served["detail"]["Table Properties"]
    assert served["detail"]["Location"] == f"file:{lake}/SHOP/ORDERS"
