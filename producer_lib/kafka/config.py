"""librdkafka configuration of the transactional data producer, each fixed value with its reason."""

from __future__ import annotations

import logging
from typing import Any

from producer_lib.kafka.transactions import LibrdkafkaLog
from producer_lib.settings import KafkaSettings

__all__ = ["PRODUCER_DEFAULTS", "producer_config"]

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,  # retries must not duplicate or reorder rows
    "acks": "all",  # a committed row survives the loss of a broker
    "linger.ms": 20,  # bulk loads: fill batches rather than send early
    "batch.size": 1_000_000,  # bytes per batch; stays under the broker's 1 MiB message.max.bytes
    "batch.num.messages": 100_000,  # let batch.size, not the message count, close a batch
    "queue.buffering.max.messages": 500_000,  # room for a few DuckDB batches in flight
    "queue.buffering.max.kbytes": 131_072,  # 128 MiB bound on queued bytes: flat memory
}


def producer_config(settings: KafkaSettings, transactional_id: str) -> dict[str, Any]:
    """Defaults, then the settings (their ``overrides`` win), then the transactional id.

    librdkafka's own log lines go to the ``producer_lib.kafka.librdkafka`` logger, through
    a :class:`~producer_lib.kafka.transactions.LibrdkafkaLog` that keeps the latest
    transaction error.
    """
    return {
        **PRODUCER_DEFAULTS,
        "transaction.timeout.ms": settings.transaction_timeout_ms,
        "logger": LibrdkafkaLog(logging.getLogger("producer_lib.kafka.librdkafka")),
        **settings.to_librdkafka(),
        "transactional.id": transactional_id,
    }
