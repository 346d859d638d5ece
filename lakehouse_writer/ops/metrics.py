"""The writer's metrics, kept with prometheus-client, served on ``LAKEHOUSE_METRICS_PORT``.

:class:`WriterMetrics` watches the writer in-process (a
:class:`~lakehouse_writer.runtime.status.StatusObserver`: every status written, every query progress
recorded) and keeps what it saw in a registry of its own; :class:`MetricsServer` serves it at
``/metrics`` with the standard library's HTTP server, on a thread of its own. The names
(Prometheus conventions: base units, ``_total`` for counters; labels ``table`` and ``topic``):

- ``lakehouse_writer_rows_applied_total{table}``: change rows applied, per table;
- ``lakehouse_writer_rows_rejected_total``: rows written to ``_rejected``;
- ``lakehouse_writer_messages_read_total{topic}``: offsets the query read past, per topic
  (rows, plus one transaction marker per partition and transaction): throughput;
- ``lakehouse_writer_batches_total``, ``lakehouse_writer_last_batch_id``,
  ``lakehouse_writer_last_batch_timestamp_seconds``;
- ``lakehouse_writer_batch_duration_seconds`` (a histogram) and
  ``lakehouse_writer_last_batch_duration_seconds``: a trigger's whole time, from Spark's
  progress (``durationMs.triggerExecution``) of batches that ran;
- ``lakehouse_writer_last_progress_timestamp_seconds``: when the query last reported progress
  (an idle query reports every 10 s);
- ``lakehouse_writer_lag_offsets{topic,partition}``: offsets behind the latest one;
- ``lakehouse_writer_stopped_tables`` and ``lakehouse_writer_table_stopped{table}``;
- ``lakehouse_writer_pending_commits``; ``lakehouse_writer_state{state}`` (1 for the
  current one: running, stopped, drained, failed);
- ``lakehouse_writer_table_last_change_timestamp_seconds{table}``: the newest
  ``__change_time`` a table holds (freshness is ``time()`` minus it), read from the Delta
  log's file statistics (:mod:`lakehouse_writer.ops.overview`) at a scrape, for the tables a
  batch changed since the last one;
- ``lakehouse_writer_build_info{version}``.

Counts, times and names only: no row's values, no error text (those are on the status page,
behind authentication: :mod:`lakehouse_writer.ops.ui`). Counters count from the process's
start, as Prometheus expects (``rate()`` handles restarts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, get_args

from prometheus_client import Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.ops.overview import TableReader, table_names
from lakehouse_writer.runtime.status import BatchStats, WriterRunState, offsets_read, partition_lag
from producer_lib._version import installed_version
from producer_lib.prometheus import CONTENT_TYPE, exposition, new_registry

__all__ = ["CONTENT_TYPE", "MetricsServer", "MetricsUnavailable", "WriterMetrics"]

log = logging.getLogger(__name__)

_PREFIX = "lakehouse_writer_"
# A micro-batch takes from a fraction of a second (a few rows) to minutes (a reload).
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class MetricsUnavailable(LakehouseWriterError):
    """The metrics endpoint cannot listen where it was told to (a port in use, a bad host)."""


class WriterMetrics:
    """What the writer did, kept for ``/metrics`` (thread-safe: Spark and HTTP threads).

    Args:
        lakehouse: The lakehouse root: the tables' freshness is read there at a scrape.
            None: no freshness metric.
    """

    def __init__(self, lakehouse: str | None = None) -> None:
        """Start with nothing seen."""
        self.registry = new_registry()
        self._lock = threading.Lock()
        self._counted = -1  # the last batch whose rows are counted
        self._timed: set[int] = set()  # batch ids whose duration is counted (last few)
        self._lag_labels: set[tuple[str, str]] = set()
        self._stopped: set[str] = set()
        self._off: set[tuple[str, str]] = set()  # (table, reason) of the fast path gauge
        self._define()
        self._state(BatchStats(state="running"))
        self.freshness = Freshness(lakehouse) if lakehouse else None
        if self.freshness is not None:
            self.registry.register(self.freshness)

    def _define(self) -> None:
        r = self.registry
        self._rows = Counter(
            _PREFIX + "rows_applied", "Change rows applied, per table.", ["table"], registry=r
        )
        self._rejected = Counter(
            _PREFIX + "rows_rejected", "Rows written to _rejected.", registry=r
        )
        self._read = Counter(
            _PREFIX + "messages_read",
            "Offsets read past, per topic (rows and transaction markers).",
            ["topic"],
            registry=r,
        )
        self._batches = Counter(_PREFIX + "batches", "Micro-batches applied.", registry=r)
        self._last_id = Gauge(
            _PREFIX + "last_batch_id", "Id of the last batch applied (-1: none).", registry=r
        )
        self._last_time = Gauge(
            _PREFIX + "last_batch_timestamp_seconds",
            "When the last batch was applied (Unix time; 0: none).",
            registry=r,
        )
        self._duration = Histogram(
            _PREFIX + "batch_duration_seconds",
            "Seconds each batch's trigger took.",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self._last_duration = Gauge(
            _PREFIX + "last_batch_duration_seconds",
            "Seconds the last batch's trigger took.",
            registry=r,
        )
        self._progress_time = Gauge(
            _PREFIX + "last_progress_timestamp_seconds",
            "When the streaming query last reported progress (Unix time; 0: never).",
            registry=r,
        )
        self._lag = Gauge(
            _PREFIX + "lag_offsets",
            "Offsets behind the latest, per partition.",
            ["topic", "partition"],
            registry=r,
        )
        self._stopped_count = Gauge(
            _PREFIX + "stopped_tables", "Tables stopped by a schema error.", registry=r
        )
        self._table_stopped = Gauge(
            _PREFIX + "table_stopped", "1 for each stopped table.", ["table"], registry=r
        )
        self._off_fast_path = Gauge(
            _PREFIX + "tables_off_fast_path",
            "1 for each table a fast path declined this run (Spark writes it), with the reason.",
            ["table", "reason"],
            registry=r,
        )
        self._pending = Gauge(
            _PREFIX + "pending_commits", "Producer commits waiting for rows.", registry=r
        )
        self._state_gauge = Gauge(
            _PREFIX + "state", "1 for the writer's current state.", ["state"], registry=r
        )
        Info(_PREFIX + "build", "The writer's version.", registry=r).info(
            {"version": installed_version()}
        )

    def on_status(self, stats: BatchStats) -> None:
        """Count a batch's rows once (the status of one batch is written several times)."""
        with self._lock:
            if stats.batch_id > self._counted:
                self._counted = stats.batch_id
                self._batches.inc()
                self._rejected.inc(stats.rejected)
                for table, rows in stats.rows.items():
                    self._rows.labels(table).inc(rows)
                if self.freshness is not None:
                    self.freshness.changed(stats.rows)
            self._state(stats)

    def _state(self, stats: BatchStats) -> None:
        self._last_id.set(stats.batch_id)
        self._last_time.set(_epoch(stats.finished_at))
        self._pending.set(stats.pending_commits)
        self._stopped_count.set(len(stats.stopped_tables))
        for table in self._stopped - set(stats.stopped_tables):
            self._table_stopped.remove(table)
        for table in stats.stopped_tables:
            self._table_stopped.labels(table).set(1)
        self._stopped = set(stats.stopped_tables)
        for table, reason in self._off - set(stats.off_fast_path.items()):
            self._off_fast_path.remove(table, reason)
        for table, reason in stats.off_fast_path.items():
            self._off_fast_path.labels(table, reason).set(1)
        self._off = set(stats.off_fast_path.items())
        for state in get_args(WriterRunState):
            self._state_gauge.labels(state).set(int(state == stats.state))

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Take the lag, the offsets read and, for a trigger that ran a batch, its duration."""
        lag = partition_lag(progress)
        durations = progress.get("durationMs") or {}
        batch_id = int(progress.get("batchId", -1))
        with self._lock:
            self._progress_time.set(_epoch(str(progress.get("timestamp") or "")))
            for topic, read in offsets_read(progress).items():
                self._read.labels(topic).inc(read)
            if lag:
                self._set_lag({(t, str(p)): n for (t, p), n in lag.items()})
            if "addBatch" in durations and batch_id not in self._timed:  # not an idle trigger
                self._timed = {*sorted(self._timed)[-100:], batch_id}
                seconds = float(durations.get("triggerExecution", 0)) / 1000
                self._last_duration.set(seconds)
                self._duration.observe(seconds)

    def _set_lag(self, lag: dict[tuple[str, str], int]) -> None:
        for gone in self._lag_labels - lag.keys():  # a partition no longer read
            self._lag.remove(*gone)
        for labels, behind in lag.items():
            self._lag.labels(*labels).set(behind)
        self._lag_labels = set(lag)

    def scrape(self, accept: str | None = None) -> tuple[bytes, str]:
        """The body and content type of a scrape whose ``Accept`` header is ``accept``."""
        return exposition(self.registry, accept)

    def render(self) -> str:
        """The metrics in the classic Prometheus text format (0.0.4)."""
        return self.scrape()[0].decode()


class Freshness(Collector):
    """``lakehouse_writer_table_last_change_timestamp_seconds{table}``, read at a scrape.

    The newest ``__change_time`` of each table is read from its Delta log's file statistics
    (no data scanned): at the first scrape every table the writer applied (``_writer_state``),
    after that only the tables a batch changed since the scrape before. On the scraper's
    thread, never the writer's.
    """

    def __init__(self, lakehouse: str) -> None:
        self._lakehouse = lakehouse
        self._reader = TableReader(lakehouse)
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._listed = False  # the tables of _writer_state were read (at the first scrape)
        self._newest: dict[str, float] = {}

    def changed(self, rows: Mapping[str, int]) -> None:
        """Tables a batch applied rows to: read again at the next scrape."""
        with self._lock:
            self._dirty.update(table for table, n in rows.items() if n)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the changed tables, then yield every table's newest change time."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not self._listed:
            dirty.update(self._applied_tables())
        for table in sorted(dirty):
            facts = self._reader.facts(table)
            if facts is not None and facts.newest_change is not None:
                self._newest[table] = facts.newest_change.timestamp()
        family = GaugeMetricFamily(
            _PREFIX + "table_last_change_timestamp_seconds",
            "Newest __change_time a table holds (Unix time): freshness is time() minus it.",
            labels=["table"],
        )
        for table, newest in sorted(self._newest.items()):
            family.add_metric([table], newest)
        yield family

    def _applied_tables(self) -> list[str]:
        try:
            names = table_names(self._lakehouse)
        except Exception as exc:  # noqa: BLE001 - asked again at the next scrape
            log.warning("tables not listed for freshness error=%s: %s", type(exc).__name__, exc)
            return []
        self._listed = True
        return names

    def describe(self) -> list[GaugeMetricFamily]:
        """The family without reading anything (the registry asks at registration)."""
        return []


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() if iso else 0.0
    except ValueError:
        return 0.0


class MetricsServer:
    """``GET /metrics`` → ``scrape(accept)``, on a daemon thread; a context manager.

    Args:
        scrape: Returns the body and content type a scrape with this ``Accept`` header gets.
        port: The port to listen on (0: any free one; see :attr:`port`).
        host: The address to listen on (``0.0.0.0``: every interface, as a scraper in
            another container needs). The endpoint carries no data values: it is open, as
            Prometheus expects.
    """

    def __init__(
        self, scrape: Callable[[str | None], tuple[bytes, str]], port: int, host: str = "0.0.0.0"
    ) -> None:
        """Listen at once; serve from :meth:`start`.

        Raises:
            MetricsUnavailable: The address cannot be listened on (names host and port).
        """
        try:
            self._server = ThreadingHTTPServer((host, port), _handler(scrape))
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


def _handler(scrape: Callable[[str | None], tuple[bytes, str]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path.split("?")[0] != "/metrics":
                self._send(404, "text/plain; charset=utf-8", b"only /metrics here\n")
                return
            body, kind = scrape(self.headers.get("Accept"))
            self._send(200, kind, body)

        def _send(self, code: int, kind: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - its name
            log.debug("metrics request " + format, *args)

    return Handler
