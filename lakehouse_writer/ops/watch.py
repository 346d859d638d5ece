"""What watches a running writer: metrics, the monitoring consumer group, topic retention.

Settings (environment variables of :class:`~lakehouse_writer.settings.LakehouseSettings`):

- ``LAKEHOUSE_METRICS_PORT``: serve Prometheus text at ``http://<host>:<port>/metrics``
  (:mod:`lakehouse_writer.ops.metrics`); unset or 0: no endpoint (the default).
- ``LAKEHOUSE_METRICS_HOST``: the address it listens on; ``0.0.0.0`` (every interface).
- ``LAKEHOUSE_MONITOR_GROUP``: the consumer group the writer commits its end offsets to,
  for monitoring only (:mod:`lakehouse_writer.ops.monitor`); unset: ``lakehouse-writer-<instance
  id>`` (one per checkpoint; ``lakehouse-writer status`` prints it); ``off``: none.

Always on: :class:`~lakehouse_writer.ops.expiry.ExpiryWatch` warns when rows the writer has not
read yet have used half of their topic's retention (before Kafka deletes them);
:class:`~lakehouse_writer.ops.history.History` keeps the last hour of lag and throughput per
topic in the checkpoint, for the status page (``lakehouse-writer ui``).

With the OpenLineage client's variables set (``OPENLINEAGE_URL``, ...): the run's OpenLineage
events, topics in and tables out (:mod:`lakehouse_writer.ops.lineage`).

:func:`watching` starts what the settings ask for around a run and stops it after.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from lakehouse_writer.engines import ids
from lakehouse_writer.ops.expiry import ExpiryWatch
from lakehouse_writer.ops.history import History
from lakehouse_writer.ops.lineage import writer_lineage
from lakehouse_writer.ops.metrics import MetricsServer, WriterMetrics
from lakehouse_writer.ops.monitor import MonitorGroup, default_group
from lakehouse_writer.runtime.status import StatusObserver, observed

if TYPE_CHECKING:
    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["monitor_group_of", "watching"]

log = logging.getLogger(__name__)

_OFF = {"off", "none", "false", "0", "-", ""}  # LAKEHOUSE_MONITOR_GROUP values that mean none


def monitor_group_of(watch: LakehouseSettings, instance_id: str) -> str | None:
    """The monitoring group's name for a writer instance; None when turned off."""
    if watch.monitor_group is None:
        return default_group(instance_id)
    name = watch.monitor_group.strip()
    return None if name.lower() in _OFF else name


@contextmanager
def watching(settings: LakehouseSettings) -> Iterator[WriterMetrics | None]:
    """Serve metrics and commit to the monitoring group, as ``settings`` ask, inside the block.

    Yields:
        The metrics kept (None without an endpoint).

    Raises:
        MetricsUnavailable: The metrics port cannot be listened on.
        ConfigError: A ``LAKEHOUSE_METRICS_*``/``LAKEHOUSE_MONITOR_GROUP`` setting is wrong.
    """
    watch = settings
    observers: list[StatusObserver] = []
    metrics: WriterMetrics | None = None
    with ExitStack() as stack:
        if watch.metrics_port:
            metrics = WriterMetrics(settings.lakehouse_path)
            server = MetricsServer(metrics.scrape, watch.metrics_port, watch.metrics_host)
            stack.enter_context(server)
            observers.append(metrics)
        if monitor_group_of(watch, "x") is not None:

            def group() -> str:
                name = monitor_group_of(watch, ids.instance_id(settings.checkpoint_path))
                log.info("monitor group=%s (offsets for monitoring only)", name)
                return str(name)

            monitor = MonitorGroup(settings.kafka_client_conf(), group)
            stack.callback(monitor.close)
            observers.append(monitor)
        expiry = ExpiryWatch(settings.kafka_client_conf())
        stack.callback(expiry.close)
        observers.append(expiry)
        history = History(settings.checkpoint_path)
        stack.callback(history.save)
        observers.append(history)
        lineage = writer_lineage(settings, lambda: ids.instance_id(settings.checkpoint_path))
        if lineage is not None:  # OPENLINEAGE_* set: docs/LINEAGE.md
            observers.append(lineage)
        stack.enter_context(observed(*observers))
        yield metrics
