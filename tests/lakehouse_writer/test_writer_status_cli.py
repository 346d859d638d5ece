"""``lakehouse-writer status`` and ``resume-table`` as an operator runs them, on local paths.

No JVM: the status file and ``_writer_state`` (a Delta table, written here with delta-rs in
the writer's schema) are read and written as the commands do on a local lakehouse. The
end-to-end run (a table stopped by the real writer, resumed, applied again) is in
``test_resume_table_e2e.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_writer.cli import main
from lakehouse_writer.runtime.status import STATUS_FILE, BatchStats, read_status, write_status

ME, OTHER = "a1b2c3", "ffffff"
_STATE = pa.schema(
    [
        ("instance", pa.string()),
        ("batch_id", pa.int64()),
        ("kind", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("table", pa.string()),
        ("version", pa.int64()),
        ("commit_id", pa.string()),
        ("record", pa.string()),
        ("error", pa.string()),
        ("written_at", pa.timestamp("us", tz="UTC")),
    ]
)


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(lakehouse, checkpoint) of a writer instance ``ME`` that has run."""
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "lakehouse_writer_instance").write_text(ME)
    monkeypatch.delenv("LAKEHOUSE_MONITOR_GROUP", raising=False)
    return lake, checkpoint


def _state_rows(lake: Path, *rows: tuple[str, int, str, str | None, str | None]) -> None:
    """Append ``(instance, batch_id, kind, table, error)`` rows to ``_writer_state``."""
    names = ["instance", "batch_id", "kind", "table", "error"]
    data = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    now = datetime.now(UTC)
    columns = {f.name: data.get(f.name, [None] * len(rows)) for f in _STATE}
    columns["written_at"] = [now] * len(rows)
    write_deltalake(str(lake / "_writer_state"), pa.table(columns, schema=_STATE), mode="append")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _args(where: tuple[Path, Path]) -> list[str]:
    lake, checkpoint = where
    return ["--lakehouse", str(lake), "--checkpoint", str(checkpoint)]


def test_no_status_yet_exits_3_and_says_so(where, capsys):
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 3
    assert f"no status yet: {where[1]}/{STATUS_FILE} does not exist" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_cut_status_file_is_unreadable_with_its_own_exit_code(where, capsys, as_json):
    """Not a traceback with exit 1, the code of a failed writer (issue "silent damage", 8)."""
    write_status(str(where[1]), BatchStats(state="drained", batch_id=3))
    status_file = where[1] / STATUS_FILE
    status_file.write_text(status_file.read_text()[:40])  # cut short
    code, out, err = _cli(capsys, "status", *_args(where), *(["--json"] if as_json else []))
    assert code == 4 and "Traceback" not in err
    if as_json:
        report = json.loads(out)
        assert report["exit_code"] == 4 and "not JSON" in report["unreadable"]
        assert str(status_file) in report["unreadable"]
    else:
        assert out.startswith("status unreadable: the status file is not JSON")
        assert str(status_file) in out


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_maintain_on_no_directory_fails_naming_the_path(tmp_path, capsys, kind):
    """A typo in a scheduled job must not look like a pass (issue "silent damage", 9)."""
    lake = tmp_path / "lake"
    if kind == "file":
        lake.write_text("not a lakehouse")
    code, out, err = _cli(
        capsys, "maintain", "--lakehouse", str(lake), "--checkpoint", str(tmp_path / "c")
    )
    assert code == 1 and "maintained" not in out
    reason = "does not exist" if kind == "missing" else "is a file, not a directory"
    assert f"the lakehouse {reason}; nothing maintained" in err and str(lake) in err


def test_a_failed_writer_exits_1_with_its_cause(where, capsys):
    write_status(
        str(where[1]),
        BatchStats(
            state="failed",
            batch_id=4,
            error="KafkaUnreachable: no broker at 10.0.0.1:9092",
            error_trace="/ckpt/writer_error.log",
        ),
    )
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 1
    assert "state: failed" in out and "error: KafkaUnreachable: no broker at 10.0.0.1:9092" in out
    assert "PROBLEM: the writer failed: KafkaUnreachable" in out


def test_a_healthy_writer_exits_0_and_shows_its_last_batch(where, capsys):
    stats = BatchStats(state="drained", batch_id=7, rows={"SHOP.ORDERS": 12}, lag={"orders": 3})
    write_status(str(where[1]), stats)
    _state_rows(where[0], (OTHER, 2, "stopped", "SHOP.ORDERS", "another writer's"))
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 0, out
    assert "state: drained" in out and "last batch: 7" in out
    assert "rows applied (last batch): SHOP.ORDERS=12" in out and "lag (offsets): orders=3" in out
    assert "stopped tables (0, from _writer_state): none" in out
    assert f"monitor group: lakehouse-writer-{ME}" in out
    assert "off the fast path" not in out  # every table took it


def test_tables_off_the_fast_path_are_listed_and_still_healthy(where, capsys):
    reason = "delta-rs cannot reach s3a:// storage"
    stats = BatchStats(state="running", batch_id=2, off_fast_path={"SHOP.ORDERS": reason})
    write_status(str(where[1]), stats)
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 0, out  # slower, not wrong
    assert f"tables off the fast path (1):\n  SHOP.ORDERS: {reason}" in out


def test_a_stopped_table_in_the_state_exits_1_naming_it_also_as_json(where, capsys):
    write_status(str(where[1]), BatchStats(state="running", batch_id=3))  # the file lists none
    _state_rows(where[0], (ME, 3, "stopped", "SHOP.ORDERS", "incompatible column type AMOUNT"))
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 1
    assert "  SHOP.ORDERS: incompatible column type AMOUNT" in out
    assert "PROBLEM: table SHOP.ORDERS is stopped; fix it, then resume-table SHOP.ORDERS" in out
    code, out, _ = _cli(capsys, "status", *_args(where), "--json")
    report = json.loads(out)
    assert code == report["exit_code"] == 1
    assert report["stopped_tables"] == {"SHOP.ORDERS": "incompatible column type AMOUNT"}
    assert report["status"]["state"] == "running" and report["instance"] == ME


def test_a_running_status_nobody_rewrites_is_a_problem(where, capsys):
    write_status(str(where[1]), BatchStats(state="running", batch_id=3))
    _age_status(where[1], minutes=10)
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 1
    assert "last written 600 s ago" in out and "the writer may be gone" in out


def _age_status(checkpoint: Path, minutes: int) -> None:
    path = checkpoint / STATUS_FILE
    status = json.loads(path.read_text())
    then = datetime.now(UTC) - timedelta(minutes=minutes)
    path.write_text(json.dumps({**status, "updated_at": then.isoformat()}))


def test_resume_table_removes_only_this_writers_stop_and_status_turns_healthy(where, capsys):
    lake, checkpoint = where
    stats = BatchStats(state="stopped", batch_id=5, stopped_tables={"SHOP.ORDERS": "bad"})
    write_status(str(checkpoint), stats)
    _state_rows(
        lake,
        (ME, 1, "table", "SHOP.ORDERS", None),
        (ME, 5, "stopped", "SHOP.ORDERS", "incompatible column type AMOUNT"),
        (OTHER, 6, "stopped", "SHOP.ORDERS", "another writer's"),
    )
    assert _cli(capsys, "status", *_args(where))[0] == 1

    code, out, err = _cli(capsys, "resume-table", "SHOP.ORDERS", *_args(where))
    assert code == 0, err
    assert "resumed SHOP.ORDERS (it was stopped by: incompatible column type AMOUNT)" in out
    rows = DeltaTable(str(lake / "_writer_state")).to_pyarrow_table().to_pylist()
    assert sorted((r["instance"], r["kind"]) for r in rows) == [(ME, "table"), (OTHER, "stopped")]
    assert read_status(str(checkpoint))["stopped_tables"] == {}
    code, out, _ = _cli(capsys, "status", *_args(where))
    assert code == 0, out

    code, _, err = _cli(capsys, "resume-table", "SHOP.ORDERS", *_args(where))
    assert code == 1
    assert "table SHOP.ORDERS is not stopped; stopped tables of this writer: none" in err


def test_resume_table_names_an_unknown_table_and_lists_the_stopped_ones(where, capsys):
    _state_rows(where[0], (ME, 5, "stopped", "SHOP.ORDERS", "x"))
    code, _, err = _cli(capsys, "resume-table", "shop.orders", *_args(where))
    assert code == 1
    assert "table shop.orders is not stopped (did you mean SHOP.ORDERS?)" in err
    assert "stopped tables of this writer: SHOP.ORDERS" in err and "table='shop.orders'" in err


def test_resume_table_refuses_while_the_writer_runs_unless_forced(where, capsys):
    lake, checkpoint = where
    write_status(str(checkpoint), BatchStats(state="running", batch_id=5))
    _state_rows(lake, (ME, 5, "stopped", "SHOP.ORDERS", "x"))
    code, _, err = _cli(capsys, "resume-table", "SHOP.ORDERS", *_args(where))
    assert code == 1
    assert "a writer runs on this checkpoint (status 'running', written 0 s ago)" in err
    assert f"checkpoint='{checkpoint}'" in err
    assert (lake / "_writer_state").exists() and _cli(capsys, "status", *_args(where))[0] == 1

    _age_status(checkpoint, minutes=10)  # a writer that died without a word
    assert _cli(capsys, "resume-table", "SHOP.ORDERS", *_args(where))[0] == 0


def test_resume_table_with_force_and_without_a_writer_instance(where, tmp_path, capsys):
    lake, checkpoint = where
    write_status(str(checkpoint), BatchStats(state="running", batch_id=5))
    _state_rows(lake, (ME, 5, "stopped", "SHOP.ORDERS", "x"))
    assert _cli(capsys, "resume-table", "SHOP.ORDERS", *_args(where), "--force")[0] == 0
    code, _, err = _cli(
        capsys,
        "resume-table",
        "SHOP.ORDERS",
        "--lakehouse",
        str(lake),
        "--checkpoint",
        str(tmp_path / "never-used"),
    )
    assert code == 1 and "no writer has run with this checkpoint" in err


def test_the_console_command_runs_without_a_jvm(where):
    write_status(str(where[1]), BatchStats(state="drained", batch_id=1))
    done = subprocess.run(
        [sys.executable, "-m", "lakehouse_writer", "status", *_args(where)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "state: drained" in done.stdout
    assert "Spark" not in done.stderr


def test_the_raising_entry_point_raises_the_exit_code_of_status(where):
    from lakehouse_writer.cli import run_command

    with pytest.raises(SystemExit) as raised:
        run_command(["status", *_args(where)])
    assert raised.value.code == 3
    write_status(str(where[1]), BatchStats(state="drained", batch_id=1))
    run_command(["status", *_args(where)])  # healthy: returns
