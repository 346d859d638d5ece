"""The shipped Prometheus rules and Grafana dashboard (deploy/): valid, tested, and in step
with the metrics the writer exports.

- ``promtool check rules`` / ``check config`` and ``promtool test rules`` (the unit tests in
  ``deploy/prometheus/lakehouse-writer-rules.test.yml``: every alert fires on made-up series
  when it should, with its annotations, and not before);
- the dashboard decodes into ``grafana-foundation-sdk``'s models (generated from Grafana's own
  schema) and back without losing a field: a misspelt or misplaced key would be dropped;
- every metric the rules and the dashboard name is one the writer serves.

A real Prometheus against a running writer is in ``test_see_it_run.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lakehouse_writer.ops.metrics import WriterMetrics
from lakehouse_writer.runtime.status import BatchStats
from tests.support.browser import need

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "lakehouse-writer.json"
PROMQL_BUILTINS = {"up"}  # series Prometheus makes itself


def _promtool(*args: str, cwd: Path = PROMETHEUS) -> str:
    done = subprocess.run(
        [need("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.prometheus
def test_the_rules_and_the_example_config_pass_promtool():
    assert "SUCCESS: 7 rules found" in _promtool("check", "rules", "lakehouse-writer-rules.yml")
    assert "SUCCESS" in _promtool("check", "config", "prometheus.yml")


@pytest.mark.prometheus
def test_every_alert_fires_when_its_unit_test_says():
    assert "SUCCESS" in _promtool("test", "rules", "lakehouse-writer-rules.test.yml")
    tested = set(
        re.findall(
            r"alertname: (\w+)", (PROMETHEUS / "lakehouse-writer-rules.test.yml").read_text()
        )
    )
    defined = set(
        re.findall(r"- alert: (\w+)", (PROMETHEUS / "lakehouse-writer-rules.yml").read_text())
    )
    assert tested == defined  # no alert without a test


def _round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda o: o.to_json()))


def _lost(original: Any, back: Any, path: str = "") -> list[str]:
    """Where ``back`` lacks or changed what ``original`` holds."""
    if isinstance(original, dict):
        if not isinstance(back, dict):
            return [f"{path}: became {type(back).__name__}"]
        return [
            problem
            for key, value in original.items()
            for problem in (
                _lost(value, back[key], f"{path}.{key}")
                if key in back
                else [f"{path}.{key} dropped"]
            )
        ]
    if isinstance(original, list):
        if not isinstance(back, list) or len(back) != len(original):
            return [f"{path}: list changed"]
        return [
            p
            for i, (a, b) in enumerate(zip(original, back, strict=True))
            for p in _lost(a, b, f"{path}[{i}]")
        ]
    return [] if original == back else [f"{path}: {original!r} became {back!r}"]


def test_the_dashboard_decodes_as_grafanas_schema_says_without_losing_a_field():
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    original = json.loads(DASHBOARD.read_text())
    back = _round_trip(Dashboard.from_json(original).to_json())
    assert _lost(original, back) == []
    panels = original["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:  # on Grafana's 24-column grid, each target with its own ref id
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])


def _exported(tmp_path: Path) -> set[str]:
    metrics = WriterMetrics(str(tmp_path))
    metrics.on_status(BatchStats(batch_id=0, rows={"A.B": 1}, stopped_tables={"A.B": "x"}))
    progress = {"batchId": 0, "timestamp": "2026-01-01T00:00:00Z", "durationMs": {"addBatch": 1}}
    source = {"endOffset": '{"t": {"0": 1}}', "latestOffset": '{"t": {"0": 2}}'}
    metrics.on_progress({**progress, "sources": [source]})
    names = set()
    for family in text_string_to_metric_families(metrics.render()):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_the_rules_and_the_dashboard_name_only_metrics_the_writer_serves(tmp_path):
    exported = _exported(tmp_path)
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    rules = (PROMETHEUS / "lakehouse-writer-rules.yml").read_text()
    named = set(re.findall(r"\b(lakehouse_writer_\w+|up)\b", " ".join([*exprs, rules])))
    assert named - exported - PROMQL_BUILTINS == set()
    assert "lakehouse_writer_table_last_change_timestamp_seconds" in named
