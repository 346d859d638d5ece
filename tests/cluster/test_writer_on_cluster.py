"""The writer on a real Spark standalone cluster (master + two one-core workers, loopback).

Run as users run it (docs/CLUSTER.md): ``spark-submit --master spark://… --jars <the
connector jars> writer_main.py run …``, and ``lakehouse-writer run --master spark://…`` from
this machine, which ships its own jars to the executors.

Which of the local checks run here (the representative set):

- ``test_writer_e2e.py``'s transactions: inserts over two partitions with a ``_commits``
  record, an update and a delete, an aborted transaction, a scoped TRUNCATE and a REPLACE,
  three undecodable messages → the exact rows, ``_rejected`` with the bytes as sent, the
  commit once, status ``drained``; a second run applies nothing. ``LAKEHOUSE_SMALL_MERGE_ROWS=0``
  so the MERGEs run as Spark jobs on the executors, not in the driver with delta-rs.
- ``test_hadoop_checkpoint.py``'s replay: the last batch's Spark commit file removed (the
  driver died before Spark recorded it), the next run replays that batch and changes nothing;
  every (txnAppId, txnVersion) is in each table's Delta log once.
- every row type of DESIGN, a GDPR delete (``G``) among them: a flow's initial load (TRUNCATE
  and REPLACE), then one transaction of U, D, X, P, I, A, a BEFORE image whose UPDATE moved
  the key, a scoped TRUNCATE and G rows, each applied by ``lakehouse-writer run --once
  --master spark://…`` → the exact rows; the GDPR purge rewrote the table on the executors
  (Delta's ``REORG … APPLY (PURGE)`` cannot run there: lakehouse_writer/engines/spark/gdpr.py), and
  after ``lakehouse-writer maintain`` no Parquet file under the table holds a deleted row.
  Its runs are ``lakehouse-writer run --master`` without ``--jars``: the executors fetch the
  connector jars from the driver.
- ``test_writer_crash.py``'s load with a worker killed mid-batch: ``test_worker_killed.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from producer_lib.schema import schema_fingerprint, single_object_header
from tests.cluster.conftest import (
    SMALL_CLUSTER_CONF,
    SparkCluster,
    delta_rows,
    spark_submit_argv,
    submit_env,
)
from tests.support.writer import T0, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]


def _rows(path: Path, columns: tuple[str, ...] = ("ID", "NAME", "REGION")) -> list[tuple]:
    return delta_rows(path, columns)


def _txn_counts(table: Path) -> Counter:
    """How often each (txnAppId, txnVersion) was committed to the table's Delta log."""
    seen: Counter = Counter()
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line else {}
            if "txn" in action:
                seen[(action["txn"]["appId"], action["txn"]["version"])] += 1
    return seen


def _commit_record(topic: str, time_us: int) -> tuple[str, bytes, bytes]:
    """test_writer_e2e's ``_commits`` record of the four inserts."""
    commit_id = str(uuid.uuid4())
    value = {
        "commit_id": commit_id,
        "producer": "test",
        "source_system": "TEST",
        "function_name": "f",
        "transaction_time": time_us,
        "tables": [{"topic": topic, "table": "SHOP.ORDERS", "rows": 4}],
        "partitions": [
            {"topic": topic, "partition": 0, "min_offset": 0, "max_offset": 3, "rows": 4}
        ],
    }
    return commit_id, commit_id.encode(), json.dumps(value).encode()


def _poison_values(schema_json: dict) -> list[bytes]:
    """Three values the writer cannot decode: no header, unknown schema, truncated body."""
    good_header = single_object_header(schema_fingerprint(schema_json))
    return [
        b"random bytes, no header",
        b"\xc3\x01" + b"\x01" * 8 + b"\x02abc",
        good_header + b"\x02",
    ]


def _produce(bootstrap: str, topic: str, commits: str) -> str:
    """test_writer_e2e's transactions: I, U, D, an aborted one, T + R, three poison values."""
    schema = sample_schema()
    commit_id, ckey, cvalue = _commit_record(topic, T0 + 1)
    inserts = [
        {
            "ID": i,
            "NAME": f"n{i}",
            "REGION": "A" if i < 4 else "B",
            "__change_type": "I",
            "__change_time": T0 + 1,
            "partition": i % 2,
        }
        for i in range(1, 5)
    ]
    produce_transaction(bootstrap, topic, schema, inserts, extra=[(commits, ckey, cvalue)])
    changes = [
        {"ID": 1, "NAME": "n1-updated", "REGION": "A", "__change_type": "U", "partition": 1},
        {"ID": 2, "NAME": "n2", "__change_type": "D"},
    ]
    produce_transaction(bootstrap, topic, schema, [{**r, "__change_time": T0 + 2} for r in changes])
    ghost = {"ID": 99, "NAME": "ghost", "__change_type": "I", "__change_time": T0 + 3}
    produce_transaction(bootstrap, topic, schema, [ghost], commit=False)
    reload = [
        {"ID": 0, "__change_type": "T", "__change_time": T0 + 4, "__truncate": {"REGION": "B"}},
        {"ID": 10, "NAME": "n10", "REGION": "B", "__change_type": "R", "__change_time": T0 + 4},
    ]
    produce_transaction(bootstrap, topic, schema, reload)
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in _poison_values(schema.to_avro_json()):
        producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    return commit_id


def _run(argv: list[str], env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert done.returncode == 0, tail


def _apps_on(cluster: SparkCluster, name: str) -> list[dict]:
    """The cluster's finished applications called ``name``."""
    state = cluster.state()
    return [a for a in state["completedapps"] + state["activeapps"] if a["name"] == name]


def _ran_tasks(cluster: SparkCluster, app_id: str) -> list[int]:
    """The workers whose executor of ``app_id`` ran a task."""
    return [
        worker
        for worker in range(len(cluster.workers))
        for log in cluster.executor_logs(worker)
        if log.parent.parent.name == app_id and "Running task" in log.read_text(errors="replace")
    ]


def test_spark_submit_applies_every_row_type_once_and_a_replay_changes_nothing(
    spark_cluster, connector_jars, writer_main, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic(partitions=2)
    schemas, commits = new_topic(suffix="_schemas"), new_topic(suffix="_commits")
    publish_schemas(kafka_bootstrap, topic, schemas, sample_schema())
    commit_id = _produce(kafka_bootstrap, topic, commits)
    lake, ckpt, log = tmp_path / "lake", tmp_path / "ckpt", tmp_path / "writer.log"
    writer_args = [
        "--lakehouse",
        str(lake),
        "--checkpoint",
        str(ckpt),
        "--once",
        "--topics",
        f"{topic}|{commits}",
        "--bootstrap-servers",
        kafka_bootstrap,
    ]
    argv = spark_submit_argv(spark_cluster, connector_jars, writer_main, writer_args)
    env = submit_env(
        LAKEHOUSE_SCHEMAS_TOPIC=schemas,
        LAKEHOUSE_COMMITS_TOPIC=commits,
        LAKEHOUSE_SMALL_MERGE_ROWS="0",  # MERGEs as Spark jobs on the executors
    )
    _run(argv, env, log)

    orders = lake / "SHOP" / "ORDERS"
    expected = [(1, "n1-updated", "A"), (3, "n3", "A"), (10, "n10", "B")]
    assert _rows(orders) == expected
    rejected = _rows(lake / "_rejected", ("value", "topic"))
    poison = _poison_values(sample_schema().to_avro_json())
    assert rejected == sorted((value, topic) for value in poison)  # the bytes as sent
    assert _rows(lake / "_commits", ("commit_id",)) == [(commit_id,)]
    status = json.loads((ckpt / "writer_status.json").read_text())
    assert status["state"] == "drained" and status["rows_applied"] == {"SHOP.ORDERS": 8}
    apps = _apps_on(spark_cluster, "lakehouse-writer")
    assert apps, "the writer did not run on the cluster"
    assert _ran_tasks(spark_cluster, apps[-1]["id"]) != [], "no executor ran a task"

    # the driver died after the last batch, before Spark recorded it: the next run replays it
    spark_commits = ckpt / "commits"
    last = max(int(p.name) for p in spark_commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (spark_commits / name).unlink()
    version = DeltaTable(str(orders)).version()
    _run(argv, env, log)
    assert (spark_commits / str(last)).exists()  # the batch ran again
    assert DeltaTable(str(orders)).version() == version  # and changed nothing
    assert _rows(orders) == expected
    assert _rows(lake / "_rejected", ("value", "topic")) == rejected
    assert _rows(lake / "_commits", ("commit_id",)) == [(commit_id,)]
    for name in ("SHOP/ORDERS", "_commits", "_rejected", "_writer_state"):
        twice = [k for k, n in _txn_counts(lake / name).items() if n > 1]
        assert twice == [], f"{name}: applied twice"
    assert len(_apps_on(spark_cluster, "lakehouse-writer")) == len(apps) + 1


def _assert_jars_shipped(cluster: SparkCluster, connector_jars: list[str], log: Path) -> None:
    """``lakehouse-writer run --master`` ran on ``cluster``, whose executors fetched the
    connector jars from the driver (the writer put them in ``spark.jars`` itself)."""
    assert f"spark session master={cluster.url}" in log.read_text(errors="replace")
    app = _apps_on(cluster, "lakehouse-writer")[-1]
    fetched = [
        log_file.read_text(errors="replace")
        for worker in range(len(cluster.workers))
        for log_file in cluster.executor_logs(worker)
        if log_file.parent.parent.name == app["id"]
    ]
    shipped = [Path(j).name for j in connector_jars]
    assert fetched and all(any(name in f for f in fetched) for name in shipped), (
        "the executors did not fetch the connector jars from the driver"
    )


SECRET = "Erika Mustermann 7f3a"  # the name of a customer whose row a GDPR delete erases
GDPR_KEYS = (7, 8)
COLUMNS = ("ID", "NAME", "REGION", "__change_type")


def _initial_load(bootstrap: str, topic: str) -> list[tuple]:
    """A flow's initial load: an unscoped TRUNCATE, then a REPLACE of rows 1-12; its rows."""
    rows = [
        {
            "ID": i,
            "NAME": SECRET if i == 8 else f"n{i}",
            "REGION": "B" if i >= 10 else "A",
            "__change_type": "R",
            "partition": i % 2,
        }
        for i in range(1, 13)
    ]
    truncate = {"ID": 0, "__change_type": "T", "__truncate": None}
    load = [{**r, "__change_time": T0 + 1} for r in (truncate, *rows)]
    produce_transaction(bootstrap, topic, sample_schema(), load)
    return sorted((r["ID"], r["NAME"], r["REGION"], "R") for r in rows)


def _every_row_type(bootstrap: str, topic: str) -> list[tuple]:
    """One transaction of U, D, X, P, I, A, B (key 6 moved to 60), a scoped T and G rows.

    Returns the rows the table must then hold, by DESIGN's row types: P keeps the stored
    payload, the TRUNCATE of region B deletes the older rows 10-12 but not 13 of its own
    transaction, B deletes the old key of its moved UPDATE, G deletes 7 and 8.
    """
    changes = [
        {"ID": 1, "NAME": "n1-u", "REGION": "A", "__change_type": "U"},
        {"ID": 2, "NAME": "n2", "REGION": "A", "__change_type": "D"},
        {"ID": 3, "__change_type": "X", "partition": 1},
        {"ID": 4, "NAME": "p-image", "REGION": "A", "__change_type": "P"},
        {"ID": 20, "NAME": "n20", "REGION": "A", "__change_type": "I"},
        {"ID": 5, "NAME": "n5-a", "REGION": "A", "__change_type": "A", "partition": 1},
        {"ID": 6, "NAME": "n6", "REGION": "A", "__change_type": "B", "__source_rowid": "r6"},
        {"ID": 60, "NAME": "n6-m", "REGION": "A", "__change_type": "U", "__source_rowid": "r6"},
        {"ID": 0, "__change_type": "T", "__truncate": {"REGION": "B"}},
        {"ID": 13, "NAME": "n13", "REGION": "B", "__change_type": "I", "partition": 1},
        {"ID": 7, "__change_type": "G", "partition": 1},
        {"ID": 8, "__change_type": "G"},
    ]
    produce_transaction(
        bootstrap, topic, sample_schema(), [{**c, "__change_time": T0 + 2} for c in changes]
    )
    return [
        (1, "n1-u", "A", "U"),
        (4, "n4", "A", "P"),
        (5, "n5-a", "A", "A"),
        (9, "n9", "A", "R"),
        (13, "n13", "B", "I"),
        (20, "n20", "A", "I"),
        (60, "n6-m", "A", "U"),
    ]


def _holders(table: Path) -> list[str]:
    """Parquet files under ``table`` (every version's data, Change Data Feed, checkpoints)
    holding a GDPR-deleted row: its key in an ``ID`` column, or the name anywhere."""
    found = []
    for file in sorted(table.rglob("*.parquet")):
        data = pq.read_table(file)
        ids = set(data.column("ID").to_pylist()) if "ID" in data.column_names else set()
        if ids & set(GDPR_KEYS) or SECRET in str(data.to_pylist()):
            found.append(str(file.relative_to(table)))
    return found


def _current_holders(table: Path) -> list[str]:
    """Current data files of the table holding a GDPR-deleted key (deletion vectors ignored)."""
    return [
        uri
        for uri in DeltaTable(str(table)).file_uris()
        if set(pq.read_table(uri.removeprefix("file://")).column("ID").to_pylist()) & set(GDPR_KEYS)
    ]


def test_every_row_type_with_a_gdpr_delete_then_maintain_leaves_no_file_with_the_row(
    spark_cluster, connector_jars, kafka_bootstrap, new_topic, tmp_path
):
    topic, schemas = new_topic(partitions=2), new_topic(suffix="_schemas")
    publish_schemas(kafka_bootstrap, topic, schemas, sample_schema())
    lake, ckpt, log = tmp_path / "lake", tmp_path / "ckpt", tmp_path / "writer.log"
    orders = lake / "SHOP" / "ORDERS"
    where = ["--lakehouse", str(lake), "--checkpoint", str(ckpt)]
    on_cluster = ["--master", spark_cluster.url, *SMALL_CLUSTER_CONF]
    writer = [str(Path(sys.executable).parent / "lakehouse-writer")]
    run = [*writer, "run", *on_cluster, *where, "--once", "--topics", topic]
    run += ["--bootstrap-servers", kafka_bootstrap]
    # Spark's MERGE and purge, as tasks on the executors (not delta-rs in the driver)
    env = submit_env(LAKEHOUSE_SCHEMAS_TOPIC=schemas, LAKEHOUSE_SMALL_MERGE_ROWS="0")

    loaded = _initial_load(kafka_bootstrap, topic)
    _run(run, env, log)
    assert delta_rows(orders, COLUMNS) == loaded
    _assert_jars_shipped(spark_cluster, connector_jars, log)

    expected = _every_row_type(kafka_bootstrap, topic)
    _run(run, env, log)

    assert delta_rows(orders, COLUMNS) == expected
    assert not (lake / "_rejected").exists() or delta_rows(lake / "_rejected", ("error",)) == []
    operations = [h["operation"] for h in DeltaTable(str(orders)).history()]
    assert operations[:3] == ["SET TBLPROPERTIES", "OPTIMIZE", "MERGE"], operations  # newest 1st
    assert _current_holders(orders) == []
    assert _holders(orders), "no file held the rows before maintenance: the test proves nothing"

    maintain = [*writer, "maintain", *on_cluster, *where, "--table", "SHOP.ORDERS"]
    _run(maintain, {**env, "LAKEHOUSE_GDPR_COMPLETION_HOURS": "0"}, log)

    assert _holders(orders) == []
    assert delta_rows(orders, COLUMNS) == expected
