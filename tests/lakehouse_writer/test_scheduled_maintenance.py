"""Maintenance inside a running writer, between batches (``LAKEHOUSE_MAINTAIN_INTERVAL_S``)."""

from __future__ import annotations

import pytest

from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream import job
from lakehouse_writer.tables.retention import MaintainSettings
from lakehouse_writer.tables.scheduled import ScheduledMaintenance
from producer_lib.errors import ConfigError
from tests.support.writer import (
    T0,
    produce_transaction,
    published_topic,
    sample_schema,
    writer_env,
)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"LAKEHOUSE_MAINTAIN_INTERVAL_S": "hourly"}, "LAKEHOUSE_MAINTAIN_INTERVAL_S: .*number"),
        ({"LAKEHOUSE_MAINTAIN_BUDGET_S": "-1"}, "LAKEHOUSE_MAINTAIN_BUDGET_S: .*greater than"),
    ],
)
def test_bad_settings_name_their_variable(env, match, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=match):
        LakehouseSettings()


def test_off_unless_asked(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKEHOUSE_MAINTAIN_INTERVAL_S", raising=False)
    settings = LakehouseSettings()
    scheduled = ScheduledMaintenance(
        None,  # type: ignore[arg-type]
        "/lake",
        settings.maintain_interval_s,
        settings.maintain_budget_s,
        settings=settings.maintain,
    )
    scheduled.between_batches()  # no session: a pass would fail
    assert scheduled.interval_s is None and scheduled.passes == 0


def _history(spark, path: str) -> list[str]:
    from delta.tables import DeltaTable

    return [r.operation for r in DeltaTable.forPath(spark, path).history().collect()]


def _tiny_tables(spark, lake: str, count: int) -> None:
    for i in range(count):
        for part in range(3):  # three appends: three small files to compact
            frame = spark.createDataFrame([(i, part)], "T INT, P INT")
            frame.write.format("delta").mode("append").save(f"{lake}/NS/T{i}")


@pytest.mark.slow
def test_each_pass_takes_the_next_tables_in_turn(spark, tmp_path):
    lake = str(tmp_path / "lake")
    _tiny_tables(spark, lake, 3)
    scheduled = ScheduledMaintenance(  # one table a pass
        spark, lake, interval_s=0, budget_s=0, settings=MaintainSettings(compact_min_files=2)
    )

    optimized = []
    for _ in range(3):
        scheduled.between_batches()
        optimized.append(
            sorted(t for t in ("T0", "T1", "T2") if "OPTIMIZE" in _history(spark, f"{lake}/NS/{t}"))
        )

    assert optimized == [["T0"], ["T0", "T1"], ["T0", "T1", "T2"]]


@pytest.mark.kafka
@pytest.mark.slow
def test_a_writer_run_maintains_its_tables_between_batches(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    for t in range(3):  # three transactions, one batch each: the pass after the second compacts
        rows = [
            {"ID": 10 * t + i, "NAME": f"n{t}", "__change_type": "I", "__change_time": T0 + t}
            for i in range(3)
        ]
        produce_transaction(kafka_bootstrap, topic, schema, rows)
    monkeypatch.setenv("LAKEHOUSE_MAINTAIN_INTERVAL_S", "0")  # after every batch
    monkeypatch.setenv("LAKEHOUSE_COMPACT_MIN_FILES", "2")
    lake, ckpt = str(tmp_path / "lake"), str(tmp_path / "ckpt")
    env = writer_env(lake, ckpt, kafka_bootstrap, LAKEHOUSE_SCHEMAS_TOPIC=schemas)
    settings = LakehouseSettings(
        **env, LAKEHOUSE_TOPICS_REGEX=topic, LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER=3
    )

    job.run(spark, settings, once=True)

    path = str(tmp_path / "lake" / "SHOP" / "ORDERS")
    ids = sorted(r.ID for r in spark.read.format("delta").load(path).collect())
    assert ids == [10 * t + i for t in range(3) for i in range(3)]
    assert "OPTIMIZE" in _history(spark, path)
