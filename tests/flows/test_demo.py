"""``make demo``, the README's first command, as written (TPC-H scale factor 0.01).

The demo compares row counts and TPC-H Q1 and Q3 on the Delta tables with the source and
exits non-zero on any mismatch, and prints the names the writer registered its tables under
in a Hive metastore; this test runs it through make (the target sets up what it
needs, here already set up by ``make test``) against the test broker
(``KAFKA_BOOTSTRAP_SERVERS``: the demo starts none then) and reads its last line.

Slow: four flow runs and three writer runs (Spark), several minutes on two cores.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]


def test_make_demo_runs_end_to_end_and_finds_no_mismatch(kafka_bootstrap, capsys):
    # The demo's scale, 0.01: at 0.002 DuckDB's dbgen repeated 60 partsupp keys (key check).
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    env.pop("DEMO_TPCH_SCALE", None)
    # As a user's shell runs it: under `make test` these make the demo's make a sub-make,
    # which prints "make[1]: Leaving directory ..." after the demo's last line.
    for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"):
        env.pop(name, None)
    done = subprocess.run(
        ["make", "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=3600
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    with capsys.disabled():
        print(f"\nmake demo: {last}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert last.startswith("OK: demo finished"), done.stdout[-4000:]
    registered = [x for x in done.stdout.splitlines() if "registered in the Hive metastore" in x]
    tables = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
    assert registered and all(f"spark_catalog.tpch.{t}" in registered[0] for t in tables), (
        done.stdout[-4000:]
    )
