"""The writer's session under a real ``spark-submit``: its master and jars are kept.

``lakehouse-writer run`` used to force ``local[2]`` over the master ``spark-submit`` gave.
The driver script here builds the session as ``run`` does (:func:`cli.start_session`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse_writer.runtime import jars

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DRIVER = """
import json
from lakehouse_writer.cli import _parser, start_session
args = _parser().parse_args(["run", "--conf", "spark.sql.shuffle.partitions=3"])
try:
    spark = start_session(args)
    print("RESULT", json.dumps({"master": spark.sparkContext.master,
                               "shuffle": spark.conf.get("spark.sql.shuffle.partitions")}))
except Exception as exc:
    print("RESULT", json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
"""


def _submit(tmp_path: Path, *options: str) -> dict:
    """``spark-submit --master local[1] OPTIONS driver.py``; the driver's RESULT line."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_MASTER", None)
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            *options,
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_spark_submit_keeps_its_master_and_jars_and_conf_applies(tmp_path):
    given = ",".join(str(p) for p in sorted(jars.default_dir().glob("*.jar")))
    if not given:
        pytest.skip("connector jars not resolved yet")
    assert _submit(tmp_path, "--jars", given) == {"master": "local[1]", "shuffle": "3"}


def test_a_session_without_the_connectors_says_which_and_how_to_give_them(tmp_path):
    error = _submit(tmp_path)["error"]
    assert error.startswith("ConnectorsMissing: the Spark session lacks Kafka source")
    assert "--jars" in error and "LAKEHOUSE_JARS_DIR" in error and "master='local[1]'" in error
