"""``lakehouse-writer replay-rejected``: rejected rows applied once their cause is fixed.

With the real broker, Spark and Delta. The rows land in ``_rejected`` because their value
schema is not published yet (the writer knows an older version of it); the schema is then
published and the rows replayed. One lake serves the dry run, the replay, the second replay
and the row that still fails (each test checks its own step; they run in this order, as
the fixtures chain them); the kill test has a lake of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from lakehouse_writer.cli import main
from lakehouse_writer.ops.replay import (
    REPLAYED,
    ReplayRefused,
    ReplaySummary,
    check_table_name,
    parse_since,
    summary_lines,
)
from producer_lib.schema import AvroNVarchar, ValueSchema
from tests.support.kafka import topic_name
from tests.support.writer import T0, produce_transaction, publish_schemas, sample_schema

ORDERS = sample_schema("ORDERS")
REPLAY_APP = "lakehouse-writer:replay:SHOP.ORDERS"


def _with(column: str) -> ValueSchema:
    """ORDERS with one more nullable text column: a new version of its value schema."""
    schema = sample_schema("ORDERS")
    schema.add_field(column, AvroNVarchar(20))
    return schema


V2, V3 = _with("NOTE"), _with("EXTRA")  # V2 is published late, V3 never


def _row(i: int, name: str, t: int, kind: str = "I") -> dict[str, Any]:
    return {
        "ID": i,
        "NAME": name,
        "AMOUNT": Decimal("1.00"),
        "NOTE": f"note{i}",
        "__change_type": kind,
        "__change_time": T0 + t,
    }


# -- pure parts ---------------------------------------------------------------------------------


def test_since_takes_an_iso_time_and_names_itself_when_it_is_not_one() -> None:
    assert parse_since("2026-11-28T10:00:00+00:00") == datetime(2026, 11, 28, 10, tzinfo=UTC)
    with pytest.raises(ValueError, match="--since takes an ISO time"):
        parse_since("yesterday")


def test_a_bad_since_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["replay-rejected", "--lakehouse", "l", "--checkpoint", "c", "--since", "soon"])
    assert exit_.value.code == 2
    assert "--since" in capsys.readouterr().err


def test_a_table_name_without_namespace_is_refused_before_spark_starts(tmp_path, capsys) -> None:
    with pytest.raises(ReplayRefused, match="NAMESPACE.NAME"):
        check_table_name("ORDERS")
    check_table_name("SHOP.ORDERS")
    where = ["--lakehouse", str(tmp_path / "l"), "--checkpoint", str(tmp_path / "c")]
    assert main(["replay-rejected", *where, "--table", "ORDERS"]) == 1
    assert "table='ORDERS'" in capsys.readouterr().err


def test_the_summary_names_tables_counts_and_reasons() -> None:
    summary = ReplaySummary(replay_id=3, applied={"SHOP.ORDERS": 2})
    summary.failing[("SHOP.ORDERS", "unknown __change_type Z")] += 1
    assert summary_lines(summary) == [
        "replay 3",
        "  replayed 2 rows into SHOP.ORDERS",
        "  still failing 1 rows (SHOP.ORDERS): unknown __change_type Z",
    ]
    assert summary_lines(ReplaySummary()) == ["nothing to replay: no rejected row can be taken"]


# -- with Kafka, Spark and Delta ----------------------------------------------------------------


@dataclass
class Lake:
    """A lakehouse whose ``_rejected`` holds rows of a value schema published late."""

    root: Path
    checkpoint: Path
    topic: str
    schemas: str
    bootstrap: str

    @property
    def where(self) -> list[str]:
        return ["--lakehouse", str(self.root), "--checkpoint", str(self.checkpoint)]

    @property
    def replay(self) -> list[str]:
        """``replay-rejected`` of this lake (and broker), options to follow."""
        return ["replay-rejected", *self.where, "--bootstrap-servers", self.bootstrap]

    @property
    def table(self) -> Path:
        return self.root / "SHOP" / "ORDERS"

    def version(self, name: str = "SHOP/ORDERS") -> int:
        return max(int(p.stem) for p in (self.root / name / "_delta_log").glob("*.json"))

    def run(self) -> None:
        argv = ["run", *self.where, "--once", "--topics", self.topic]
        assert main([*argv, "--bootstrap-servers", self.bootstrap]) == 0


def _make_lake(
    base: Path, admin: AdminClient, bootstrap: str, name: str, mp: pytest.MonkeyPatch
) -> Lake:
    """ID 1 and 2 applied (v1); then, under V2 (unknown), an older ID 1, ID 3 and a row of an
    unknown change type, and a V3 row: all four land in ``_rejected``; V2 is then published."""
    topic, schemas = topic_name(name), topic_name(name, "_schemas")
    for created in admin.create_topics([NewTopic(t, 1, 1) for t in (topic, schemas)]).values():
        created.result(timeout=30)
    mp.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    mp.setenv("LAKEHOUSE_MONITOR_GROUP", "off")
    mp.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
    lake = Lake(base / "lake", base / "ckpt", topic, schemas, bootstrap)
    publish_schemas(bootstrap, topic, schemas, ORDERS)
    produce_transaction(bootstrap, topic, ORDERS, [_row(1, "n1", 10), _row(2, "n2", 10)])
    lake.run()
    late = [_row(1, "older", 5), _row(3, "n3", 20), _row(4, "n4", 20, kind="Z")]
    produce_transaction(bootstrap, topic, V2, late)
    produce_transaction(bootstrap, topic, V3, [_row(5, "n5", 20)])
    lake.run()
    publish_schemas(bootstrap, topic, schemas, V2)
    return lake


@pytest.fixture(scope="module")
def lake(spark, kafka_bootstrap, kafka_admin, tmp_path_factory) -> Iterator[Lake]:
    """One lake for the dry run, the replay, the second replay and the row still failing."""
    with pytest.MonkeyPatch.context() as mp:
        yield _make_lake(tmp_path_factory.mktemp("replay"), kafka_admin, kafka_bootstrap, "r", mp)


def _rejected(spark, lake: Lake) -> dict[int, tuple[str, str | None]]:
    """``_rejected`` by offset: (error, table)."""
    rows = spark.read.format("delta").load(str(lake.root / "_rejected")).collect()
    return {r["offset"]: (r["error"], r["table"]) for r in rows}


def _replayed(spark, lake: Lake) -> list[tuple[int, int, str]]:
    rows = spark.read.format("delta").load(str(lake.root / REPLAYED)).collect()
    return sorted((r["replay_id"], r["offset"], r["outcome"]) for r in rows)


def _orders(spark, lake: Lake) -> list[tuple]:
    frame = spark.read.format("delta").load(str(lake.table))
    return sorted(tuple(r) for r in frame.select("ID", "NAME", "NOTE").collect())


def _replay_txns(lake: Lake) -> list[tuple[str, int]]:
    """(appId, version) of every txn action of the table's log, in commit order."""
    found = []
    for commit in sorted((lake.table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line else {}
            if "txn" in action and action["txn"]["appId"].startswith("lakehouse-writer:replay"):
                found.append((action["txn"]["appId"], action["txn"]["version"]))
    return found


def _orders_v1(spark, lake: Lake) -> list[tuple]:
    frame = spark.read.format("delta").load(str(lake.table))
    return sorted(tuple(r) for r in frame.select("ID", "NAME").collect())


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_the_setup_rejects_the_rows_of_the_unknown_schemas(spark, lake) -> None:
    the_lake = lake
    rejected = _rejected(spark, the_lake)
    assert len(rejected) == 4
    assert all("unknown writer schema" in error for error, _ in rejected.values())
    assert _orders_v1(spark, the_lake) == [(1, "n1"), (2, "n2")]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_dry_run_changes_nothing_and_reports_counts(spark, lake, capfd) -> None:
    the_lake = lake
    before = (the_lake.version(), the_lake.version("_rejected"))
    assert main([*the_lake.replay, "--dry-run"]) == 0
    out = capfd.readouterr().out
    assert (the_lake.version(), the_lake.version("_rejected")) == before
    assert not (the_lake.root / REPLAYED).exists()
    assert "(dry run)" in out
    assert "would apply 3 rows into SHOP.ORDERS" in out
    assert "still failing 1 rows (no table): unknown writer schema" in out


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_replay_applies_the_fixed_rows_once_and_marks_them(spark, lake, capfd) -> None:
    the_lake = lake
    assert main([*the_lake.replay]) == 0
    out = capfd.readouterr().out
    assert "replayed 2 rows into SHOP.ORDERS" in out, out
    # the older ID 1 lost to the stored, newer one; ID 3 is new; the Z row failed
    assert _orders(spark, the_lake) == [(1, "n1", None), (2, "n2", None), (3, "n3", "note3")]
    offsets = {o: outcome for _, o, outcome in _replayed(spark, the_lake) if outcome != "planned"}
    assert sorted(offsets.values()) == ["applied", "applied", "failing", "failing"]
    assert len(_replay_txns(the_lake)) == 1

    version, rejected = the_lake.version(), _rejected(spark, the_lake)
    assert main([*the_lake.replay]) == 0
    out = capfd.readouterr().out
    assert the_lake.version() == version  # nothing applied twice
    assert "replayed" not in out.replace("replay 1", "")
    assert _rejected(spark, the_lake) == rejected
    second = {outcome for r, _, outcome in _replayed(spark, the_lake) if r == 1}
    assert second == {"planned", "failing"}  # only the two rows that still fail, again

    assert main([*the_lake.replay, "--since", "2999-01-01T00:00:00+00:00"]) == 0
    assert "nothing to replay" in capfd.readouterr().out
    assert main([*the_lake.replay, "--table", "SHOP.NOPE"]) == 1
    assert "table='SHOP.NOPE'" in capfd.readouterr().err


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_row_that_still_fails_stays_with_its_new_reason(spark, lake, capfd) -> None:
    the_lake = lake
    errors = sorted(error for error, _ in _rejected(spark, the_lake).values())
    assert len(errors) == 4  # none removed
    unknown = [e for e in errors if "unknown writer schema" in e]
    assert len(unknown) == 3, errors  # two applied rows keep theirs; V3's row is still unknown
    new = [e for e in errors if "unknown writer schema" not in e]
    assert new == ["unknown __change_type Z"], errors  # the Z row: now the rules' reason
    tables = {error: table for error, table in _rejected(spark, the_lake).values()}
    assert tables["unknown __change_type Z"] == "SHOP.ORDERS"  # its table, known now


# The replay as a process that SIGKILLs itself once its table writes are committed, before
# it writes the reasons and marks the rows: the window is too short to hit from outside.
KILLED_AFTER_APPLY = """
import os, signal, sys
from lakehouse_writer import cli
from lakehouse_writer.ops import replay

def killed(*args, **kwargs):
    print("replay killed after apply", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

replay._write_reasons = killed
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_replay_killed_after_its_table_commit_applies_nothing_twice(
    spark, kafka_bootstrap, kafka_admin, tmp_path, capfd
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        lake = _make_lake(tmp_path, kafka_admin, kafka_bootstrap, "replay_kill", mp)
        env = {
            **os.environ,
            "LAKEHOUSE_SCHEMAS_TOPIC": lake.schemas,
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        }
        with open(tmp_path / "replay.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", KILLED_AFTER_APPLY, *lake.replay],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = proc.wait(300)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the JVM, should it linger
                except ProcessLookupError:
                    pass
        text = (tmp_path / "replay.log").read_text(errors="replace")
        assert rc == -signal.SIGKILL, text[-3000:]
        # the kill landed between the table commit and the marking
        assert _replay_txns(lake) == [(REPLAY_APP, 1023)], text[-3000:]
        assert {o for _, _, o in _replayed(spark, lake)} == {"planned"}
        version = lake.version()

        capfd.readouterr()
        assert main([*lake.replay]) == 0
        out = capfd.readouterr().out
        assert "finishing an unfinished replay" in out and "replayed 2 rows" in out, out
        assert lake.version() == version  # the table commit was skipped: it was done
        assert _replay_txns(lake) == [(REPLAY_APP, 1023)]  # one commit of the replay
        assert _orders(spark, lake) == [(1, "n1", None), (2, "n2", None), (3, "n3", "note3")]
        marked = [(o, outcome) for _, o, outcome in _replayed(spark, lake) if outcome == "applied"]
        assert len(marked) == len(set(marked)) == 2
