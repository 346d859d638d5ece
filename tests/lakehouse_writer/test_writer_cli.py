"""Command line parsing, settings and progress → lag; no broker, no Spark."""

from __future__ import annotations

import json

from lakehouse_writer.cli import _overrides, _parser
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream.job import lag_of


def test_run_arguments_become_settings(monkeypatch):
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "s3cret")
    args = _parser().parse_args(
        [
            "run",
            "--lakehouse",
            "/lake",
            "--checkpoint",
            "/ckpt",
            "--topics",
            "orders.*",
            "--once",
            "--trigger-interval",
            "5",
            "--max-offsets-per-trigger",
            "1000",
        ]
    )
    settings = LakehouseSettings(**_overrides(args))
    assert args.once
    assert (settings.lakehouse_path, settings.checkpoint_path) == ("/lake", "/ckpt")
    assert settings.topics_regex == "orders.*" and settings.max_offsets_per_trigger == 1000
    assert settings.trigger_interval_s == 5.0
    assert "s3cret" not in repr(settings)


def test_lag_is_latest_minus_end_offset_per_topic():
    progress = {
        "batchId": 3,
        "sources": [
            {
                "endOffset": json.dumps({"a": {"0": 10, "1": 4}, "b": {"0": 7}}),
                "latestOffset": json.dumps({"a": {"0": 12, "1": 4}, "b": {"0": 7}}),
            }
        ],
    }
    assert lag_of(progress) == {"a": 2, "b": 0}
    assert lag_of(None) == {}
