"""``lakehouse-writer rebuild --table NS.T``: a table recreated from its topics, exactly once.

With the real broker, Spark and Delta. One lake (a writer run over a reload, upserts, a
delete and a scoped TRUNCATE) serves the dry run, the rebuild of a damaged table and the
kill; the refusal has a topic of its own whose early offsets are deleted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lakehouse_writer.cli import main
from lakehouse_writer.ops import rebuild as rebuild_module
from lakehouse_writer.ops.rebuild import SIDE
from tests.support.kafka import topic_name
from tests.support.writer import T0, produce_transaction, publish_schemas, sample_schema

ORDERS = sample_schema("ORDERS", namespace="SHOPR")
TABLE = "SHOPR.ORDERS"


def _row(i: int, t: int, kind: str, name: str = "", region: str = "EU", **more: Any) -> dict:
    return {
        "ID": i,
        "NAME": name or f"n{i}",
        "REGION": region,
        "AMOUNT": Decimal("1.00"),
        "__change_type": kind,
        "__change_time": T0 + t,
        **more,
    }


HISTORY = [
    [  # a reload: TRUNCATE then REPLACE rows
        _row(0, 10, "T", __truncate=None),
        *(_row(i, 10, "R", region="EU" if i % 2 else "US") for i in range(1, 7)),
    ],
    [
        _row(2, 20, "A", name="changed", region="US"),
        _row(3, 20, "D"),
        _row(7, 20, "I", region="US"),
    ],
    [_row(0, 30, "T", __truncate={"REGION": "EU"}), _row(9, 30, "U", region="EU")],
]


@dataclass
class Lake:
    root: Path
    checkpoint: Path
    topic: str
    bootstrap: str
    env: dict[str, str]

    @property
    def where(self) -> list[str]:
        return ["--lakehouse", str(self.root), "--checkpoint", str(self.checkpoint)]

    @property
    def rebuild(self) -> list[str]:
        return ["rebuild", *self.where, "--bootstrap-servers", self.bootstrap, "--table", TABLE]

    @property
    def table(self) -> Path:
        return self.root / "SHOPR" / "ORDERS"

    def version(self) -> int:
        return max(int(p.stem) for p in (self.table / "_delta_log").glob("*.json"))

    def run(self) -> None:
        argv = ["run", *self.where, "--once", "--topics", self.topic]
        assert main([*argv, "--bootstrap-servers", self.bootstrap]) == 0


def _make_lake(
    base: Path, admin: AdminClient, bootstrap: str, name: str, mp: pytest.MonkeyPatch
) -> Lake:
    topic, schemas = topic_name(name), topic_name(name, "_schemas")
    for created in admin.create_topics([NewTopic(t, 1, 1) for t in (topic, schemas)]).values():
        created.result(timeout=30)
    env = {
        "LAKEHOUSE_SCHEMAS_TOPIC": schemas,
        "LAKEHOUSE_MONITOR_GROUP": "off",
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
    }
    for key, value in env.items():
        mp.setenv(key, value)
    publish_schemas(bootstrap, topic, schemas, ORDERS)
    return Lake(base / "lake", base / "ckpt", topic, bootstrap, env)


def _rows(spark, lake: Lake) -> list[tuple]:
    """Every column of every row, in a stable order."""
    frame = spark.read.format("delta").load(str(lake.table))
    return sorted((tuple(r) for r in frame.collect()), key=str)


@pytest.fixture(scope="module")
def lake(spark, kafka_bootstrap, kafka_admin, tmp_path_factory) -> Iterator[tuple[Lake, list]]:
    """The lake after the writer applied HISTORY, and the table's rows as the writer made them."""
    with pytest.MonkeyPatch.context() as mp:
        lake = _make_lake(
            tmp_path_factory.mktemp("rebuild"), kafka_admin, kafka_bootstrap, "rb", mp
        )
        for rows in HISTORY:
            produce_transaction(kafka_bootstrap, lake.topic, ORDERS, rows)
        lake.run()
        yield lake, _rows(spark, lake)


def _damage(spark, lake: Lake) -> None:
    spark.sql(f"DELETE FROM delta.`{lake.table}` WHERE ID = 1")
    spark.sql(f"UPDATE delta.`{lake.table}` SET NAME = 'broken' WHERE ID = 2")
    spark.sql(f"INSERT INTO delta.`{lake.table}` SELECT * FROM delta.`{lake.table}` WHERE ID = 4")


# -- without a broker ---------------------------------------------------------------------------


def test_rebuild_without_a_table_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["rebuild", "--lakehouse", "l", "--checkpoint", "c"])
    assert exit_.value.code == 2
    assert "--table" in capsys.readouterr().err


def test_a_table_name_without_namespace_is_refused(tmp_path, capsys) -> None:
    where = ["--lakehouse", str(tmp_path / "l"), "--checkpoint", str(tmp_path / "c")]
    assert main(["rebuild", *where, "--table", "ORDERS"]) == 1
    assert "table='ORDERS'" in capsys.readouterr().err


# -- with Kafka, Spark and Delta ----------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_the_writer_made_the_expected_table(lake) -> None:
    _, rows = lake
    assert sorted((r[0], r[1], r[2]) for r in rows) == [
        (2, "changed", "US"),
        (4, "n4", "US"),
        (6, "n6", "US"),
        (7, "n7", "US"),
        (9, "n9", "EU"),
    ]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_an_unknown_table_is_named(lake, capsys) -> None:
    the_lake, _ = lake
    argv = [*the_lake.rebuild[:-1], "SHOPR.NOPE"]
    assert main(argv) == 1
    assert "table='SHOPR.NOPE'" in capsys.readouterr().err


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_dry_run_prints_the_plan_and_changes_nothing(lake, capsys) -> None:
    the_lake, rows = lake
    version = the_lake.version()
    assert main([*the_lake.rebuild, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"rebuild 0 of {TABLE} (dry run)" in out, out
    assert f"{the_lake.topic} partition 0: offsets 0..14" in out, out  # to the last row applied
    assert "would apply 12 rows" in out and "offset 0" in out, out
    assert the_lake.version() == version
    assert not (the_lake.root / SIDE).exists()


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_damaged_table_is_rebuilt_to_what_the_writer_made(spark, lake, capsys) -> None:
    the_lake, rows = lake
    _damage(spark, the_lake)
    assert _rows(spark, the_lake) != rows
    version = the_lake.version()
    assert main(the_lake.rebuild) == 0
    assert "rebuilt from 12 rows" in capsys.readouterr().out
    assert _rows(spark, the_lake) == rows
    assert the_lake.version() == version + 1  # one commit swapped the rows in
    assert not (the_lake.root / SIDE / TABLE).exists()


def _killed_run(lake: Lake, script: str, log_path: Path) -> int:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *lake.rebuild],
            env={**os.environ, **lake.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(300)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the JVM, should it linger
            except ProcessLookupError:
                pass


class _StoppedBeforeSwap(Exception):
    """The rebuild's process ends between its side table and its swap."""


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_rebuild_stopped_before_its_swap_leaves_the_table_and_a_rerun_finishes(
    spark, lake, monkeypatch
) -> None:
    """In-process, a failure between the side table and the swap: the table is untouched. A
    kill -9 there would leave the side table, which the next rebuild deletes first; the kill
    -9 itself is the test after the swap, which pays a process and a JVM of its own."""
    the_lake, rows = lake
    _damage(spark, the_lake)
    damaged, version = _rows(spark, the_lake), the_lake.version()

    def stopped(*args: object, **kwargs: object) -> None:
        raise _StoppedBeforeSwap

    with monkeypatch.context() as patched:
        patched.setattr(rebuild_module, "_swap", stopped)
        with pytest.raises(_StoppedBeforeSwap):
            main(the_lake.rebuild)
    assert not (the_lake.root / SIDE / TABLE).exists()  # a failed rebuild removes its side
    assert _rows(spark, the_lake) == damaged and the_lake.version() == version  # untouched
    assert main(the_lake.rebuild) == 0
    assert _rows(spark, the_lake) == rows
    assert the_lake.version() == version + 1
    assert not (the_lake.root / SIDE / TABLE).exists()


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_rebuild_refuses_when_early_offsets_are_gone(
    spark, kafka_bootstrap, kafka_admin, tmp_path, capsys
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        lake = _make_lake(tmp_path, kafka_admin, kafka_bootstrap, "rb_gone", mp)
        produce_transaction(
            kafka_bootstrap, lake.topic, ORDERS, [_row(1, 10, "I"), _row(2, 10, "I")]
        )
        produce_transaction(kafka_bootstrap, lake.topic, ORDERS, [_row(3, 20, "I")])
        lake.run()
        done = kafka_admin.delete_records([TopicPartition(lake.topic, 0, 3)])
        for future in done.values():
            future.result(timeout=30)
        version = lake.version()
        capsys.readouterr()
        assert main(lake.rebuild) == 1
        err = capsys.readouterr().err
        assert f"{lake.topic} partition 0: first retained offset 3, needs 0" in err, err
        assert lake.version() == version


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_offsets_gone_before_the_last_reload_do_not_stop_a_rebuild(
    spark, kafka_bootstrap, kafka_admin, tmp_path, capsys
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        lake = _make_lake(tmp_path, kafka_admin, kafka_bootstrap, "rb_reload", mp)
        old = [_row(1, 10, "I"), _row(2, 10, "I")]  # offsets 0, 1 (2: the commit marker)
        reload = [_row(0, 20, "T", __truncate=None), _row(3, 20, "R"), _row(4, 20, "R")]
        for rows in (old, reload):
            produce_transaction(kafka_bootstrap, lake.topic, ORDERS, rows)
        lake.run()
        made = _rows(spark, lake)
        for future in kafka_admin.delete_records([TopicPartition(lake.topic, 0, 3)]).values():
            future.result(timeout=30)
        spark.sql(f"DELETE FROM delta.`{lake.table}` WHERE ID = 3")
        capsys.readouterr()
        assert main(lake.rebuild) == 0
        out = capsys.readouterr().out
        assert "offsets 3..6" in out and "TRUNCATE at" in out and "offset 3" in out, out
        assert _rows(spark, lake) == made
        assert sorted(r[0] for r in made) == [3, 4]


KILLED_AFTER_SWAP = """
import os, signal, sys
from lakehouse_writer import cli
from lakehouse_writer.ops import rebuild

swap = rebuild._swap

def swapped_then_killed(*args, **kwargs):
    swap(*args, **kwargs)
    print("rebuild killed after the swap", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

rebuild._swap = swapped_then_killed
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_rebuild_killed_after_its_swap_leaves_the_exact_table(spark, lake, tmp_path) -> None:
    the_lake, rows = lake
    _damage(spark, the_lake)
    version = the_lake.version()
    rc = _killed_run(the_lake, KILLED_AFTER_SWAP, tmp_path / "rebuild.log")
    text = (tmp_path / "rebuild.log").read_text(errors="replace")
    assert rc == -signal.SIGKILL and "killed after the swap" in text, text[-3000:]
    assert _rows(spark, the_lake) == rows and the_lake.version() == version + 1
    assert main(the_lake.rebuild) == 0  # a new rebuild: the same rows again, no duplicate
    assert _rows(spark, the_lake) == rows
    assert not (the_lake.root / SIDE / TABLE).exists()
