"""The writer's metrics in Prometheus text, served on ``LAKEHOUSE_METRICS_PORT`` (off by default).

:class:`WriterMetrics` watches the writer in-process (a
:class:`~lakehouse_writer.runtime.status.StatusObserver`: every status written, every query progress
recorded) and renders what it saw; :class:`MetricsServer` serves that text at ``/metrics``
with the standard library's HTTP server, on a thread of its own. The names:

- ``lakehouse_writer_rows_applied_total{table}``: change rows applied, per table;
- ``lakehouse_writer_rows_rejected_total``: rows written to ``_rejected``;
- ``lakehouse_writer_batches_total``, ``lakehouse_writer_last_batch_id``,
  ``lakehouse_writer_last_batch_timestamp_seconds``;
- ``lakehouse_writer_batch_duration_seconds`` (a summary: ``_sum``, ``_count``) and
  ``lakehouse_writer_last_batch_duration_seconds``: a trigger's whole time, from Spark's
  progress (``durationMs.triggerExecution``) of batches that ran;
- ``lakehouse_writer_lag_offsets{topic,partition}``: offsets behind the latest one;
- ``lakehouse_writer_stopped_tables`` and ``lakehouse_writer_table_stopped{table}``;
- ``lakehouse_writer_pending_commits``; ``lakehouse_writer_state{state}`` (1 for the
  current one: running, stopped, drained, failed).

Counters count from the process's start, as Prometheus expects (``rate()`` handles restarts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, get_args

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.runtime.status import BatchStats, Partition, WriterRunState, partition_lag
from producer_lib.prometheus import CONTENT_TYPE, Sample, family, summary

__all__ = ["CONTENT_TYPE", "MetricsServer", "MetricsUnavailable", "WriterMetrics"]

log = logging.getLogger(__name__)

_PREFIX = "lakehouse_writer_"


class MetricsUnavailable(LakehouseWriterError):
    """The metrics endpoint cannot listen where it was told to (a port in use, a bad host)."""


class WriterMetrics:
    """What the writer did, kept for ``/metrics`` (thread-safe: Spark and HTTP threads)."""

    def __init__(self) -> None:
        """Start with nothing seen."""
        self._lock = threading.Lock()
        self._counted = -1  # the last batch whose rows are counted
        self._rows: dict[str, int] = {}
        self._rejected = self._batches = 0
        self._last: BatchStats | None = None
        self._timed: set[int] = set()  # batch ids whose duration is counted (last few)
        self._duration_sum = self._last_duration = 0.0
        self._duration_count = 0
        self._lag: dict[Partition, int] = {}

    def on_status(self, stats: BatchStats) -> None:
        """Count a batch's rows once (the status of one batch is written several times)."""
        with self._lock:
            if stats.batch_id > self._counted:
                self._counted = stats.batch_id
                self._batches += 1
                self._rejected += stats.rejected
                for table, rows in stats.rows.items():
                    self._rows[table] = self._rows.get(table, 0) + rows
            self._last = BatchStats(
                state=stats.state,
                batch_id=stats.batch_id,
                finished_at=stats.finished_at,
                pending_commits=stats.pending_commits,
                stopped_tables=dict(stats.stopped_tables),
            )

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Take the lag per partition and, for a trigger that ran a batch, its duration."""
        lag = partition_lag(progress)
        durations = progress.get("durationMs") or {}
        batch_id = int(progress.get("batchId", -1))
        with self._lock:
            if lag:
                self._lag = lag
            if "addBatch" in durations and batch_id not in self._timed:  # not an idle trigger
                self._timed = {*sorted(self._timed)[-100:], batch_id}
                self._last_duration = float(durations.get("triggerExecution", 0)) / 1000
                self._duration_sum += self._last_duration
                self._duration_count += 1

    def render(self) -> str:
        """The metrics in Prometheus text format."""
        with self._lock:
            last = self._last or BatchStats(state="running")
            lines = [
                *_family(
                    "rows_applied_total",
                    "counter",
                    "Change rows applied, per table.",
                    [({"table": t}, n) for t, n in sorted(self._rows.items())],
                ),
                *_family(
                    "rows_rejected_total",
                    "counter",
                    "Rows written to _rejected.",
                    [({}, self._rejected)],
                ),
                *_family(
                    "batches_total", "counter", "Micro-batches applied.", [({}, self._batches)]
                ),
                *_family(
                    "last_batch_id",
                    "gauge",
                    "Id of the last batch applied (-1: none).",
                    [({}, last.batch_id)],
                ),
                *_family(
                    "last_batch_timestamp_seconds",
                    "gauge",
                    "When the last batch was applied (Unix time; 0: none).",
                    [({}, _epoch(last.finished_at))],
                ),
                *summary(
                    _PREFIX + "batch_duration_seconds",
                    "Seconds each batch's trigger took.",
                    [({}, self._duration_sum, self._duration_count)],
                ),
                *_family(
                    "last_batch_duration_seconds",
                    "gauge",
                    "Seconds the last batch's trigger took.",
                    [({}, self._last_duration)],
                ),
                *_family(
                    "lag_offsets",
                    "gauge",
                    "Offsets behind the latest, per partition.",
                    [
                        ({"topic": t, "partition": str(p)}, n)
                        for (t, p), n in sorted(self._lag.items())
                    ],
                ),
                *_family(
                    "stopped_tables",
                    "gauge",
                    "Tables stopped by a schema error.",
                    [({}, len(last.stopped_tables))],
                ),
                *_family(
                    "table_stopped",
                    "gauge",
                    "1 for each stopped table.",
                    [({"table": t}, 1) for t in sorted(last.stopped_tables)],
                ),
                *_family(
                    "pending_commits",
                    "gauge",
                    "Producer commits waiting for rows.",
                    [({}, last.pending_commits)],
                ),
                *_family(
                    "state",
                    "gauge",
                    "1 for the writer's current state.",
                    [({"state": s}, int(s == last.state)) for s in get_args(WriterRunState)],
                ),
            ]
        return "\n".join(lines) + "\n"


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else 0.0
    except ValueError:
        return 0.0


class MetricsServer:
    """``GET /metrics`` → ``render()``, on a daemon thread; a context manager.

    Args:
        render: Returns the metrics text.
        port: The port to listen on (0: any free one; see :attr:`port`).
        host: The address to listen on (``0.0.0.0``: every interface, as a scraper in
            another container needs).
    """

    def __init__(self, render: Callable[[], str], port: int, host: str = "0.0.0.0") -> None:
        """Listen at once; serve from :meth:`start`.

        Raises:
            MetricsUnavailable: The address cannot be listened on (names host and port).
        """
        try:
            self._server = ThreadingHTTPServer((host, port), _handler(render))
        except OSError as exc:
            raise MetricsUnavailable(
                f"the metrics endpoint cannot listen: {exc.strerror or exc}; set "
                "LAKEHOUSE_METRICS_PORT to a free port (unset: no endpoint)",
                host=host,
                port=port,
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="writer-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        """Serve on a daemon thread; returns self."""
        self._thread.start()
        log.info("metrics served url=http://%s:%d/metrics", *self._server.server_address[:2])
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler(render: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path.split("?")[0] != "/metrics":
                self._send(404, "text/plain; charset=utf-8", "only /metrics here\n")
                return
            self._send(200, CONTENT_TYPE, render())

        def _send(self, code: int, kind: str, text: str) -> None:
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - its name
            log.debug("metrics request " + format, *args)

    return Handler


def _family(name: str, kind: str, doc: str, samples: Iterable[Sample]) -> list[str]:
    return family(_PREFIX + name, kind, doc, samples)
