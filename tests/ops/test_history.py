"""The hour of lag and throughput the writer keeps for the status page (writer_history.json).

Fed the way the writer feeds it: Spark progress reports, as the query gives them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from lakehouse_writer.ops.history import HISTORY_FILE, STEP_S, WINDOW_S, History, read_history
from lakehouse_writer.runtime.status import offsets_read

T = 1_800_000_000  # a Unix time on a bucket boundary


def _progress(at: float, start: dict | None, end: dict, latest: dict) -> dict:
    source = {"endOffset": json.dumps(end), "latestOffset": json.dumps(latest)}
    if start is not None:
        source["startOffset"] = json.dumps(start)
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    return {"batchId": 1, "timestamp": stamp, "sources": [source]}


def test_offsets_read_count_each_topics_advance_and_a_first_batch_from_zero():
    first = _progress(T, None, {"a": {"0": 7, "1": 3}}, {"a": {"0": 7, "1": 3}})
    assert offsets_read(first) == {"a": 10}
    later = _progress(
        T, {"a": {"0": 7, "1": 3}, "b": {"0": 5}}, {"a": {"0": 9, "1": 3}, "b": {"0": 8}}, {}
    )
    assert offsets_read(later) == {"a": 2, "b": 3}


def test_reports_fold_into_buckets_lag_last_and_reads_summed(tmp_path):
    now = [T + 25.0]
    history = History(str(tmp_path), clock=lambda: now[0])
    history.on_progress(_progress(T + 1, None, {"a": {"0": 10}}, {"a": {"0": 40}}))
    history.on_progress(_progress(T + 4, {"a": {"0": 10}}, {"a": {"0": 25}}, {"a": {"0": 30}}))
    history.on_progress(_progress(T + 12, {"a": {"0": 25}}, {"a": {"0": 30}}, {"a": {"0": 30}}))
    first, second = history.buckets
    assert (first.start, first.read, first.lag) == (T, {"a": 25}, {"a": 5})
    assert (second.start, second.read, second.lag) == (T + STEP_S, {"a": 5}, {"a": 0})
    # The file is written when a bucket opens (at most every STEP_S), and read by the page.
    assert [(b.start, b.read) for b in read_history(str(tmp_path), now=now[0])] == [
        (T, {"a": 25}),
        (T + STEP_S, {"a": 5}),
    ]
    history.on_progress(_progress(T + 15, {"a": {"0": 30}}, {"a": {"0": 32}}, {"a": {"0": 32}}))
    assert read_history(str(tmp_path), now=now[0])[-1].read == {"a": 5}  # not yet
    history.save()  # the writer's last act keeps the open bucket too
    assert read_history(str(tmp_path), now=now[0])[-1].read == {"a": 7}


def test_only_the_last_hour_is_kept_and_a_restart_picks_it_up(tmp_path):
    now = [float(T)]
    history = History(str(tmp_path), clock=lambda: now[0])
    for minute in range(90):
        now[0] = T + minute * 60
        at = now[0]
        ends = {"a": {"0": minute + 1}}
        history.on_progress(_progress(at, {"a": {"0": minute}}, ends, ends))
    starts = [b.start for b in history.buckets]
    assert min(starts) > now[0] - WINDOW_S and len(starts) == 60
    history.save()
    again = History(str(tmp_path), clock=lambda: now[0])  # a restarted writer
    assert [b.start for b in again.buckets] == starts
    assert (tmp_path / HISTORY_FILE).stat().st_size < 20_000


def test_an_unreadable_file_empties_the_plots_and_is_written_anew(tmp_path):
    (tmp_path / HISTORY_FILE).write_text("{not json")
    assert read_history(str(tmp_path)) == []
    history = History(str(tmp_path), clock=lambda: T + 30.0)
    assert history.buckets == []
    history.on_progress(_progress(T + 1, None, {"a": {"0": 1}}, {"a": {"0": 1}}))
    history.save()
    assert [b.read for b in read_history(str(tmp_path), now=T + 30)] == [{"a": 1}]
