"""Table maintenance on real Delta tables: compaction, VACUUM by retention, the CLI's plan.

The tables are made with Spark SQL the way the writer makes them (Change Data Feed and
deletion vectors on, governance as ``flow.*`` properties). VACUUM keeps what was removed less
than its retention ago, and Delta stamps removals with the commit's wall clock; so a test
that must see old files go uses a retention of 0 hours (``PT0S``) rather than backdating the
log, and a test that must see them stay uses the platform default (168 h).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.tables.files import find_tables
from lakehouse_writer.tables.maintain import GDPR_MARKER, maintain_tables
from lakehouse_writer.tables.retention import (
    MaintainSettings,
    interval,
    iso_duration_hours,
    plan_table,
)
from producer_lib.errors import ConfigError

HOUR_MS = 3_600_000


@pytest.mark.parametrize(
    ("text", "hours"),
    [("P30D", 720), ("P1Y", 8760), ("PT12H", 12), ("P1W", 168), ("P1DT30M", 24.5), ("PT0S", 0)],
    ids=["30-days", "1-year", "12-hours", "1-week", "day-and-minutes", "zero"],
)
def test_iso_durations_in_hours(text, hours):
    assert iso_duration_hours(text) == pytest.approx(hours)


@pytest.mark.parametrize("text", ["30 days", "P", "PT", "P1DT", ""])
def test_not_a_duration_is_refused(text):
    with pytest.raises(ValueError, match="ISO 8601"):
        iso_duration_hours(text)


def test_settings_name_the_variable_they_refuse(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.delenv("LAKEHOUSE_HISTORY_RETENTION_HOURS", raising=False)
    monkeypatch.setenv("LAKEHOUSE_GDPR_COMPLETION_HOURS", "2.5")
    settings = LakehouseSettings().maintain
    assert settings.gdpr_completion_hours == 2.5
    assert settings.history_retention_hours == 168
    monkeypatch.setenv("LAKEHOUSE_HISTORY_RETENTION_HOURS", "-1")
    with pytest.raises(ConfigError, match="LAKEHOUSE_HISTORY_RETENTION_HOURS"):
        LakehouseSettings()


@pytest.mark.parametrize(
    ("governance", "purge_age_h", "history", "vacuum"),
    [
        (None, None, 168, 168),
        ("P30D", None, 168, 168),
        ("P1D", None, 24, 24),
        (None, 2, 168, 24),
        (None, 200, 168, 168),
        ("PT12H", 2, 12, 12),
    ],
    ids=["default", "longer-governance", "shorter-governance", "purge", "old-purge", "tiny"],
)
def test_the_plan_honours_governance_and_gdpr(governance, purge_age_h, history, vacuum):
    now = 1_800_000_000_000
    properties = {"flow.retention_period": governance} if governance else {}
    purges = [] if purge_age_h is None else [now - purge_age_h * HOUR_MS]
    plan = plan_table("S.T", properties, 3, purges, now, MaintainSettings())
    assert (plan.history_hours, plan.vacuum_hours) == (history, vacuum)
    assert plan.properties == {
        "delta.logRetentionDuration": interval(history),
        "delta.deletedFileRetentionDuration": interval(history),
    }
    assert not plan.compact


# -- real Spark, real Delta -------------------------------------------------------------------


def _table(spark, lake: Path, name: str, governance: str | None = None) -> str:
    path = str(lake / "SHOP" / name)
    extra = f", 'flow.retention_period' = '{governance}'" if governance else ""
    spark.sql(
        f"CREATE TABLE delta.`{path}` (ID BIGINT, NAME STRING) USING delta TBLPROPERTIES ("
        f"'delta.enableChangeDataFeed' = 'true', 'delta.enableDeletionVectors' = 'true'{extra})"
    )
    return path


def _append(spark, path: str, ids: range) -> None:
    for i in ids:  # one commit, one file each: what micro-batches leave behind
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i}, 'n{i}')")


def _rows(spark, path: str, version: int | None = None) -> list[tuple]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return sorted(tuple(r) for r in reader.load(path).collect())


def _stored(path: str) -> set[str]:
    root = Path(path)
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith(".")
    }


@pytest.mark.spark
@pytest.mark.slow
def test_maintain_compacts_small_files_and_keeps_every_row(spark, tmp_path):
    path = _table(spark, tmp_path, "ORDERS")
    _append(spark, path, range(12))
    rows = _rows(spark, path)
    settings = MaintainSettings(compact_min_files=5)

    [report] = maintain_tables(spark, str(tmp_path), ["SHOP.ORDERS"], settings)

    assert report.error is None, report.error
    assert (report.files_before, report.files_after) == (12, 1)
    assert _rows(spark, path) == rows
    assert report.plan is not None and report.plan.vacuum_hours == 168
    # the 12 small files stay for time travel (168 h), beside the compacted one
    assert report.stored_files_after == 13
    assert _rows(spark, path, version=5) == rows[:5]


@pytest.mark.spark
@pytest.mark.slow
def test_vacuum_keeps_the_platform_history_unless_governance_is_shorter(spark, tmp_path):
    short = _table(spark, tmp_path, "SHORT", governance="PT0S")
    default = _table(spark, tmp_path, "DEFAULT")
    for path in (short, default):
        _append(spark, path, range(3))
        spark.sql(f"UPDATE delta.`{path}` SET NAME = 'changed' WHERE ID = 1")
        spark.sql(f"REORG TABLE delta.`{path}` APPLY (PURGE)")  # rewrites the updated file
    stored_default = _stored(default)

    reports = maintain_tables(spark, str(tmp_path), None, MaintainSettings())

    by_name = {r.table: r for r in reports}
    assert set(by_name) == {"SHOP.SHORT", "SHOP.DEFAULT"}
    assert all(r.error is None for r in reports), [r.error for r in reports]
    assert by_name["SHOP.SHORT"].plan.vacuum_hours == 0  # type: ignore[union-attr]
    # PT0S: only the files of the latest version are left; old versions cannot be read
    assert by_name["SHOP.SHORT"].stored_files_after == by_name["SHOP.SHORT"].files_after
    with pytest.raises(Exception, match="(?i)time travel|not.*found|does not exist"):
        _rows(spark, short, version=2)
    # no governance: 168 h of history, nothing was old enough to go
    assert _stored(default) == stored_default
    assert _rows(spark, default, version=2) == [(0, "n0"), (1, "n1")]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{short}`").collect()[0]["properties"]
    assert detail["delta.logRetentionDuration"] == "interval 0 hours"
    assert detail["delta.deletedFileRetentionDuration"] == "interval 0 hours"


@pytest.mark.spark
@pytest.mark.slow
def test_a_delete_marked_gdpr_is_vacuumed_with_the_completion_time(spark, tmp_path):
    path = _table(spark, tmp_path, "PEOPLE")
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = false)"
    )
    _append(spark, path, range(3))
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", GDPR_MARKER)
    try:  # a delete that rewrites its file: no REORG commit follows it
        spark.sql(f"DELETE FROM delta.`{path}` WHERE ID = 1")
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    assert any("n1" in str(pq.read_table(f).to_pylist()) for f in Path(path).rglob("*.parquet"))

    settings = MaintainSettings(gdpr_completion_hours=0)
    [report] = maintain_tables(spark, str(tmp_path), ["SHOP.PEOPLE"], settings)

    assert report.error is None, report.error
    assert report.plan is not None and report.plan.vacuum_hours == 0
    assert report.plan.reason == "GDPR purge in the history"
    holders = [
        f for f in Path(path).rglob("*.parquet") if "n1" in str(pq.read_table(f).to_pylist())
    ]
    assert holders == []
    assert _rows(spark, path) == [(0, "n0"), (2, "n2")]


@pytest.mark.spark
@pytest.mark.slow
def test_cli_dry_run_prints_the_plan_and_changes_nothing(spark, tmp_path, capsys, monkeypatch):
    path = _table(spark, tmp_path, "ORDERS", governance="P1D")
    _append(spark, path, range(4))
    log_before = sorted(p.name for p in (Path(path) / "_delta_log").iterdir())
    stored_before = _stored(path)
    monkeypatch.setenv("LAKEHOUSE_COMPACT_MIN_FILES", "3")
    assert [name for name, _ in find_tables(spark, str(tmp_path))] == ["SHOP.ORDERS"]

    code = main(["maintain", "--lakehouse", str(tmp_path), "--dry-run"])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "plan SHOP.ORDERS: compact 4 small files; vacuum retain 24 h" in out, out
    assert "flow.retention_period=P1D" in out and "interval 24 hours" in out, out
    assert sorted(p.name for p in (Path(path) / "_delta_log").iterdir()) == log_before
    assert _stored(path) == stored_before


@pytest.mark.spark
@pytest.mark.slow
def test_cli_names_a_table_it_cannot_maintain_and_exits_1(spark, tmp_path, capsys):
    code = main(["maintain", "--lakehouse", str(tmp_path), "--table", "SHOP.MISSING"])

    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAILED SHOP.MISSING: no Delta table there" in out, out
    assert "FAILED: SHOP.MISSING" in out, out


@pytest.mark.spark
@pytest.mark.slow
def test_a_spent_budget_starts_no_table(spark, tmp_path):
    path = _table(spark, tmp_path, "ORDERS")
    log_before = sorted(p.name for p in (Path(path) / "_delta_log").iterdir())

    assert maintain_tables(spark, str(tmp_path), None, MaintainSettings(), budget_s=0) == []
    assert sorted(p.name for p in (Path(path) / "_delta_log").iterdir()) == log_before
