"""Before the query starts: does the Kafka cluster answer at all, within a bound?

Spark's Kafka source retries an unreachable cluster without end, logging warnings only (a
``run --once`` against ``127.0.0.1:1`` still retried after 150 s). One metadata request
with the writer's own Kafka settings, bounded by the connect timeout, turns that into a
clear error naming the bootstrap servers before anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from lakehouse_writer.errors import KafkaUnreachable, LakehouseWriterError

__all__ = ["CONNECT_TIMEOUT_ENV", "DEFAULT_CONNECT_TIMEOUT_S", "connect_timeout", "probe_kafka"]

CONNECT_TIMEOUT_ENV = "LAKEHOUSE_CONNECT_TIMEOUT_S"
DEFAULT_CONNECT_TIMEOUT_S = 30.0  # a cluster that answers at all answers within seconds
# librdkafka logs every refused connection (about 20 lines a second) to stderr; the probe's
# outcome is the one thing worth saying, so its client logs nothing.
_QUIET = {"log_level": 0}


def connect_timeout(seconds: float | None = None) -> float:
    """The connect timeout: ``seconds`` if given, else ``LAKEHOUSE_CONNECT_TIMEOUT_S``, else 30.

    Raises:
        LakehouseWriterError: The value is not a positive number.
    """
    raw = os.environ.get(CONNECT_TIMEOUT_ENV) if seconds is None else seconds
    if raw is None or raw == "":
        return DEFAULT_CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise LakehouseWriterError(
            f"the connect timeout must be a positive number of seconds, not {raw!r}; "
            f"fix {CONNECT_TIMEOUT_ENV} (or --connect-timeout)"
        )
    return value


def probe_kafka(conf: Mapping[str, str], timeout_s: float) -> None:
    """Ask the cluster for its metadata once; return when it answers.

    Args:
        conf: The writer's librdkafka settings (``bootstrap.servers``, security, SASL).
        timeout_s: How long to wait for an answer.

    Raises:
        KafkaUnreachable: No answer within ``timeout_s`` (the message names the servers).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    servers = conf.get("bootstrap.servers", "")
    admin = AdminClient({**conf, **_QUIET})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        raise KafkaUnreachable(
            f"Kafka at {servers} did not answer within {timeout_s:g} s ({reason}); check "
            f"KAFKA_BOOTSTRAP_SERVERS and the network, or raise {CONNECT_TIMEOUT_ENV}"
        ) from exc
