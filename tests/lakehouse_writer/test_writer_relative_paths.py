"""Relative ``--lakehouse ./lake --checkpoint ./ckpt`` for every writer command, JSON logs.

What an operator types in a folder of their own: ``lakehouse-writer run --once``, ``status``,
``resume-table`` and ``maintain`` with relative paths, as processes (the console script of
this venv) in a temporary working directory, with ``LOG_FORMAT=json``. Every line on stderr
must be a JSON object: the writer's own lines and the Spark driver's (log4j2, through
``lakehouse_writer/runtime/log4j2``). The one exception is the line the JVM prints itself before any
logging exists, :data:`JVM_OWN_LINE` (docs/OPERATIONS.md, "Logs").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from producer_lib.staging.extensions import load_packaged_extension
from tests.support.writer import T0, produce_transaction, published_topic, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

WRITER = str(Path(sys.executable).parent / "lakehouse-writer")
JVM_OWN_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"
WHERE = ["--lakehouse", "./lake", "--checkpoint", "./ckpt"]


def _writer(cwd: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WRITER, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _json_lines(stderr: str) -> list[dict]:
    parsed = []
    for line in filter(str.strip, stderr.splitlines()):
        if line == JVM_OWN_LINE:
            continue
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r} in:\n{stderr}")
    return parsed


def test_every_writer_command_takes_relative_paths_and_logs_json(
    kafka_bootstrap, new_topic, tmp_path
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    rows = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0} for i in (1, 2, 3)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, rows)
    work = tmp_path / "operator"
    work.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "LOG_"))},
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "LAKEHOUSE_SCHEMAS_TOPIC": schemas,
        "LAKEHOUSE_MONITOR_GROUP": "off",
        "LOG_FORMAT": "json",
    }
    if "LAKEHOUSE_JARS_DIR" in os.environ:  # where this machine keeps the connector jars
        env["LAKEHOUSE_JARS_DIR"] = os.environ["LAKEHOUSE_JARS_DIR"]

    run = _writer(work, env, "run", *WHERE, "--once", "--topics", topic)

    assert run.returncode == 0, run.stderr
    db = duckdb.connect()
    load_packaged_extension(db, "delta")  # DuckDB reads deletion vectors; delta-rs does not
    ids = db.sql(f"select ID from delta_scan('{work / 'lake' / 'SHOP' / 'ORDERS'}') order by 1")
    assert [row[0] for row in ids.fetchall()] == [1, 2, 3]
    lines = _json_lines(run.stderr)
    done = [line for line in lines if line["message"].startswith("batch done")]
    assert done and done[0]["batch"] == 0 and done[0]["logger"] == "lakehouse_writer.stream.batch"
    started = next(line for line in lines if line["message"].startswith("writer started"))
    assert f"lakehouse={work / 'lake'} checkpoint={work / 'ckpt'}" in started["message"]

    status = _writer(work, env, "status", *WHERE)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "state: drained" in status.stdout and "rows applied (last batch): SHOP.ORDERS=3" in (
        status.stdout
    )
    _json_lines(status.stderr)

    resume = _writer(work, env, "resume-table", "SHOP.ORDERS", *WHERE)
    assert resume.returncode == 1  # not stopped: refused, named
    (refusal,) = _json_lines(resume.stderr)
    assert refusal["level"] == "ERROR" and refusal["table"] == "SHOP.ORDERS"
    assert "is not stopped" in refusal["message"] and str(work / "lake") in refusal["message"]

    maintain = _writer(work, env, "maintain", *WHERE, "--dry-run")
    assert maintain.returncode == 0, maintain.stderr
    assert "plan SHOP.ORDERS:" in maintain.stdout, maintain.stdout
    _json_lines(maintain.stderr)
    # Nothing but the two folders (and Spark's empty catalog folder, made by any session).
    assert sorted(p.name for p in work.iterdir()) == ["ckpt", "lake", "spark-warehouse"]
