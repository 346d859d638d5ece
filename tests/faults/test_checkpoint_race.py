"""Two writers started at the same moment on one new checkpoint (issue "silent damage").

They race to create Spark's ``metadata`` file in the checkpoint; the loser used to stop with
the file system's ``FileAlreadyExistsException: ... metadata already exists`` and write it as
``failed`` into the winner's status file. Now it says that another writer uses the checkpoint
and leaves the winner's status alone; the winner applies the rows once.

Both writers wait for each other just before Spark's ``DataStreamWriter.start`` (where the
query creates the checkpoint's ``metadata``): on a loaded machine the two startups (settings,
probes, topic listing) otherwise drift apart by seconds and the second writer simply finds
the first one's checkpoint.
"""

from __future__ import annotations

import threading

import pytest
from pyspark.sql.streaming.readwriter import DataStreamWriter

from lakehouse_writer.cli import main
from lakehouse_writer.runtime.status import read_status
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_the_writer_that_loses_the_race_says_another_uses_the_checkpoint(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, caplog
):
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    row = {"ID": 1, "NAME": "a", "__change_type": "I", "__change_time": T0}
    produce_transaction(kafka_bootstrap, topic, schema, [row])
    _queries_start_together(monkeypatch)
    for attempt in range(RACES):  # the starts overlap nearly always; a miss is run again
        lake, checkpoint = tmp_path / f"lake{attempt}", tmp_path / f"ckpt{attempt}"
        caplog.clear()
        codes = _start_two(once_argv(lake, checkpoint, topic, kafka_bootstrap))
        if sorted(codes) != [0, 0]:
            break
    assert sorted(codes) == [0, 1], f"no race in {RACES} starts of two writers"
    lost = [r.getMessage() for r in caplog.records if "writer failed" in r.getMessage()]
    assert len(lost) == 1 and "another writer started with the checkpoint" in lost[0]
    assert "run one writer per checkpoint" in lost[0]
    assert (read_status(str(checkpoint)) or {}).get("state") == "drained"
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    assert [r.ID for r in table.collect()] == [1]


RACES = 3


def _queries_start_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make two writers' ``DataStreamWriter.start`` calls wait for each other."""
    queries = threading.Barrier(2, timeout=120)
    start_query = DataStreamWriter.start

    def start_together(self, *args, **kwargs):
        queries.wait()
        return start_query(self, *args, **kwargs)

    monkeypatch.setattr(DataStreamWriter, "start", start_together)


def _start_two(argv: list[str]) -> list[int]:
    """Exit codes of two ``run --once`` with ``argv`` started at the same moment."""
    codes: list[int] = []
    both = threading.Barrier(2)

    def start() -> None:
        both.wait()
        codes.append(main(argv))

    writers = [threading.Thread(target=start) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    return codes
