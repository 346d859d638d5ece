"""``_commits`` rows appended by delta-rs are the rows Spark's path appends.

The writer appends a batch's ``_commits`` rows by delta-rs where the table is local and plain
(:meth:`~lakehouse_writer.stream.job.BatchProcessor._append_commits`), built in Python
(:func:`~lakehouse_writer.read.commits.commit_rows`); Spark's path parses the records with
``from_json`` (:func:`~lakehouse_writer.read.commits.commit_frame`). Real Spark and Delta.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from lakehouse_writer.commit.system_tables import DeltaRsAppend, append_system, system_txn
from lakehouse_writer.read.commits import (
    COMMIT_ROW_SCHEMA,
    CommitRecord,
    commit_frame,
    commit_rows,
)
from lakehouse_writer.runtime.frames import arrow_rows

INSTANCE = "writer-1"


def _ours(topic: str) -> bool:
    return topic.startswith("erp.")


def _record(offset: int, **fields: Any) -> CommitRecord:
    data = {
        "commit_id": f"c{offset}",
        "producer": "erp-flow",
        "source_system": "ERP",
        "function_name": "erp_delta",
        "transaction_time": 1_790_000_000_123_456 + offset,
        "tables": [
            {"topic": "erp.orders", "table": "ERP.ORDERS", "rows": 12},
            {"topic": "erp.lines", "table": "ERP.LINES", "rows": 40},
            {"topic": "crm.people", "table": "CRM.PEOPLE", "rows": 1},  # not ours
        ],
        "partitions": [
            {"topic": "erp.orders", "partition": 0, "min_offset": 3, "max_offset": 14, "rows": 12},
            {"topic": "erp.lines", "partition": 2, "max_offset": 99, "rows": 40},  # no min
        ],
        "extra": {"ignored": True},  # a field the schema does not hold
        **fields,
    }
    return CommitRecord.parse(json.dumps(data), "_commits", 1, offset)


def _read(spark: Any, path: str) -> list[dict[str, Any]]:
    rows = spark.read.format("delta").load(path).drop("written_at").collect()
    return [r.asDict(recursive=True) for r in sorted(rows, key=lambda r: r.kafka_offset)]


@pytest.mark.slow
@pytest.mark.spark
def test_commits_appended_by_delta_rs_equal_the_rows_sparks_path_appends(spark, tmp_path):
    first = [_record(1)]
    second = [
        _record(5),
        _record(6, producer=None, tables=None),  # nulls
        _record(7, partitions=[], function_name="other"),
    ]
    versions = {"ERP.ORDERS": 3, "ERP.LINES": 8}
    stopped = {"ERP.LINES": "a schema error"}  # unapplied, as a table never applied is
    by_spark, by_delta_rs = str(tmp_path / "spark" / "_commits"), str(tmp_path / "rs" / "_commits")
    for path in (by_spark, by_delta_rs):  # Spark creates the table (delta-rs only appends)
        append_system(commit_frame(spark, first, versions, _ours), path, INSTANCE, 0)
    append_system(commit_frame(spark, second, versions, _ours, stopped), by_spark, INSTANCE, 1)

    rows = commit_rows(second, versions, _ours, stopped)
    assert rows is not None
    now = time.time_ns() // 1000
    data = arrow_rows([(*row, 1, now) for row in rows], COMMIT_ROW_SCHEMA)
    app_id, version = system_txn(INSTANCE, by_delta_rs, 1)
    assert DeltaRsAppend(by_delta_rs).append(data, app_id, version)
    assert DeltaRsAppend(by_delta_rs).append(data, app_id, version)  # a replay: no rows

    found = _read(spark, by_delta_rs)
    assert found == _read(spark, by_spark)
    assert [r["kafka_offset"] for r in found] == [1, 5, 6, 7]
    assert found[1]["table_versions"] == {"ERP.ORDERS": 3}
    assert found[1]["unapplied_tables"] == ["ERP.LINES"]
    assert found[1]["partitions"][1]["min_offset"] is None


def test_a_value_of_another_json_type_leaves_the_rows_to_sparks_from_json():
    versions: dict[str, int] = {}
    assert commit_rows([_record(1)], versions, _ours) is not None
    assert commit_rows([_record(1, producer=7)], versions, _ours) is None  # a number as text
    assert commit_rows([_record(1, transaction_time=1.5)], versions, _ours) is None
    assert commit_rows([_record(1, transaction_time=True)], versions, _ours) is None
    tables = [{"topic": "erp.orders", "table": "ERP.ORDERS", "rows": "12"}]
    assert commit_rows([_record(1, tables=tables)], versions, _ours) is None
    partitions = [{"topic": "erp.orders", "partition": 2**31, "max_offset": 1}]  # not an INT
    assert commit_rows([_record(1, partitions=partitions)], versions, _ours) is None
