"""``/metrics`` through prometheus-client: a registry per server, the exposition it negotiates.

Shared by ``producer-lib serve`` (:mod:`producer_lib.runner.metrics`) and the lakehouse
writer (:mod:`lakehouse_writer.ops.metrics`). Each keeps its metrics in a registry of its own
(not the library's process-wide ``REGISTRY``: a flow that uses prometheus-client itself keeps
its metrics apart, and tests can build as many servers as they like), and answers a scrape
with :func:`exposition`: the format the scraper's ``Accept`` header asks for (OpenMetrics for
Prometheus, the classic text format 0.0.4 for anything that asks for nothing in particular).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder

__all__ = ["CONTENT_TYPE", "exposition", "new_registry"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what a scrape without an Accept header gets


def new_registry() -> CollectorRegistry:
    """An empty registry of one server's metrics."""
    return CollectorRegistry(auto_describe=True)


def exposition(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """The body and content type of a scrape whose ``Accept`` header is ``accept``."""
    encode, content_type = choose_encoder(accept or "")
    return encode(registry), content_type
