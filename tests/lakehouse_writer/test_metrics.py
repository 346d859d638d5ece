"""The metrics endpoint, scraped over HTTP: what the writer's status writes and progress show.

No broker, no Spark: the figures come in the way the writer hands them over (status files
written, Spark progress reports as the query gives them). The end-to-end scrape of a running
writer is in ``test_watch_e2e.py``.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from lakehouse_writer.ops.metrics import MetricsServer, MetricsUnavailable, WriterMetrics
from lakehouse_writer.ops.watch import monitor_group_of
from lakehouse_writer.runtime.status import BatchStats, observed, write_status
from lakehouse_writer.settings import LakehouseSettings
from tests.support.metrics import Samples, samples


def _scrape(port: int, path: str = "/metrics") -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def _samples(text: str) -> Samples:
    return samples(text)


def _progress(batch_id: int, ends: dict, latest: dict, ms: int | None = 1500) -> dict:
    durations = {"triggerExecution": ms, "addBatch": ms - 100} if ms else {"latestOffset": 3}
    return {
        "batchId": batch_id,
        "timestamp": f"2026-01-01T00:00:{batch_id:02d}.000Z",
        "durationMs": durations,
        "sources": [{"endOffset": json.dumps(ends), "latestOffset": json.dumps(latest)}],
    }


def test_a_scrape_shows_rows_per_table_lag_per_partition_durations_and_stopped_tables(tmp_path):
    metrics = WriterMetrics()
    checkpoint = str(tmp_path / "ckpt")
    with MetricsServer(metrics.scrape, 0, "127.0.0.1") as server, observed(metrics):
        stats = BatchStats(
            batch_id=0,
            rows={"SHOP.ORDERS": 4, 'A."B"': 1},
            rejected=2,
            finished_at="2026-01-01T00:00:00+00:00",
        )
        write_status(checkpoint, stats)
        write_status(checkpoint, stats)  # the lag and the end rewrite it: counted once
        stats = BatchStats(
            batch_id=1,
            rows={"SHOP.ORDERS": 3},
            pending_commits=2,
            stopped_tables={"SHOP.ITEMS": "incompatible column type"},
        )
        write_status(checkpoint, stats)
        metrics.on_progress(
            _progress(1, {"orders": {"0": 7, "1": 5}}, {"orders": {"0": 9, "1": 5}})
        )
        idle = {"orders": {"0": 7, "1": 5}}
        metrics.on_progress(_progress(1, idle, {"orders": {"0": 9, "1": 5}}, ms=None))
        kind, text = _scrape(server.port)

    assert kind.startswith("text/plain; version=0.0.4")
    got = _samples(text)
    assert got['lakehouse_writer_rows_applied_total{table="SHOP.ORDERS"}'] == 7
    assert got['lakehouse_writer_rows_applied_total{table="A.\\"B\\""}'] == 1  # escaped
    assert got["lakehouse_writer_rows_rejected_total"] == 2
    assert got["lakehouse_writer_batches_total"] == 2
    assert got["lakehouse_writer_last_batch_id"] == 1
    assert got['lakehouse_writer_lag_offsets{topic="orders",partition="0"}'] == 2
    assert got['lakehouse_writer_lag_offsets{topic="orders",partition="1"}'] == 0
    # the idle trigger (no addBatch) is no batch: one duration counted
    assert got["lakehouse_writer_batch_duration_seconds_count"] == 1
    assert got["lakehouse_writer_batch_duration_seconds_sum"] == 1.5
    assert got["lakehouse_writer_stopped_tables"] == 1
    assert got['lakehouse_writer_table_stopped{table="SHOP.ITEMS"}'] == 1
    assert got["lakehouse_writer_pending_commits"] == 2
    assert got['lakehouse_writer_state{state="running"}'] == 1
    assert got['lakehouse_writer_state{state="failed"}'] == 0
    assert "# TYPE lakehouse_writer_rows_applied_total counter" in text


def test_a_failed_writer_shows_state_failed_and_other_paths_are_404(tmp_path):
    metrics = WriterMetrics()
    with MetricsServer(metrics.scrape, 0, "127.0.0.1") as server, observed(metrics):
        write_status(str(tmp_path), BatchStats(state="failed", error="KafkaUnreachable: x"))
        got = _samples(_scrape(server.port)[1])
        with pytest.raises(urllib.error.HTTPError, match="404"):
            _scrape(server.port, "/")
    assert got['lakehouse_writer_state{state="failed"}'] == 1
    assert got["lakehouse_writer_last_batch_id"] == -1


def test_a_busy_port_is_named(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsUnavailable, match=f"LAKEHOUSE_METRICS_PORT.*port={port}"):
            MetricsServer(WriterMetrics().scrape, port, "127.0.0.1")


def test_observers_are_gone_after_the_block(tmp_path):
    metrics = WriterMetrics()
    with observed(metrics):
        write_status(str(tmp_path), BatchStats(batch_id=0, rows={"T.A": 1}))
    write_status(str(tmp_path), BatchStats(batch_id=1, rows={"T.A": 5}))
    assert _samples(metrics.render())['lakehouse_writer_rows_applied_total{table="T.A"}'] == 1


@pytest.mark.parametrize(
    ("value", "group"),
    [(None, "lakehouse-writer-abc"), ("ops-lag", "ops-lag"), ("off", None), ("", None)],
    ids=["default", "named", "off", "empty"],
)
def test_the_monitor_group_is_per_instance_unless_named_or_off(monkeypatch, value, group):
    monkeypatch.delenv("LAKEHOUSE_MONITOR_GROUP", raising=False)
    if value is not None:
        monkeypatch.setenv("LAKEHOUSE_MONITOR_GROUP", value)
    assert monitor_group_of(LakehouseSettings(), "abc") == group


def test_a_bad_metrics_port_names_the_variable(monkeypatch):
    from producer_lib.errors import ConfigError

    monkeypatch.setenv("LAKEHOUSE_METRICS_PORT", "70000")
    with pytest.raises(ConfigError, match="LAKEHOUSE_METRICS_PORT"):
        LakehouseSettings()
