"""Before the query starts: does the Kafka cluster answer at all, within a bound?

Spark's Kafka source retries an unreachable cluster without end, logging warnings only (a
``run --once`` against ``127.0.0.1:1`` still retried after 150 s). One metadata request
with the writer's own Kafka settings, bounded by the connect timeout, turns that into a
clear error naming the bootstrap servers before anything starts.

A cluster that answers but refuses the writer (a wrong password, an untrusted certificate,
a listener of another security protocol) looks the same to the request: librdkafka
retries, and the request times out with "Broker transport failure". The client's errors
meanwhile say why; the probe stops at the first such error (it asks in one-second slices)
and raises :class:`KafkaRefused`, naming the settings to check, never their values.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lakehouse_writer.errors import KafkaRefused, KafkaUnreachable
from producer_lib.kafka.transactions import ClientErrors, StartupCause, classify_startup_errors

__all__ = [
    "CONNECT_TIMEOUT_ENV",
    "KafkaRefused",
    "probe_kafka",
]

CONNECT_TIMEOUT_ENV = "LAKEHOUSE_CONNECT_TIMEOUT_S"
# librdkafka logs every refused connection (about 20 lines a second) to stderr; the probe's
# outcome is the one thing worth saying, so its client logs nothing.
_QUIET = {"log_level": 0}
_SLICE_S = 1.0  # longest single metadata request: a refused login shows within ~1 s
_ADVICE: dict[StartupCause, str] = {
    "authentication": "authentication failed: check KAFKA_SASL_USERNAME and "
    "KAFKA_SASL_PASSWORD (and KAFKA_SASL_MECHANISM, KAFKA_SECURITY_PROTOCOL)",
    "tls": "the TLS handshake failed: check KAFKA_SSL_CA_LOCATION (the CA that signed the "
    "brokers' certificates) and KAFKA_SECURITY_PROTOCOL",
    "security_protocol": "the listener does not speak KAFKA_SECURITY_PROTOCOL: check it "
    "(SSL vs PLAINTEXT, SASL_ vs not) against the cluster's listener",
}
_SECRET_KEYS = ("sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password")


def probe_kafka(conf: Mapping[str, Any], timeout_s: float) -> None:
    """Ask the cluster for its metadata; return when it answers.

    Args:
        conf: The writer's librdkafka settings (``bootstrap.servers``, security, SASL).
        timeout_s: How long to wait for an answer.

    Raises:
        KafkaRefused: The cluster refused the writer (authentication, TLS, security
            protocol), as soon as the client reports it.
        KafkaUnreachable: No answer within ``timeout_s`` (the message names the servers).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    servers = conf.get("bootstrap.servers", "")
    errors = ClientErrors()
    client_conf: dict[str, Any] = {**conf, **_QUIET, "error_cb": errors}
    admin = AdminClient(client_conf)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=min(_SLICE_S, max(deadline - time.monotonic(), 0.001)))
            return
        except KafkaException as exc:
            admin.poll(0)  # serve error_cb: the client's reasons meanwhile
            cause = classify_startup_errors(errors.errors)
            if cause is not None and cause in _ADVICE:
                raise _refused(conf, cause, errors.last(cause)) from exc
            if time.monotonic() >= deadline:
                raise _unreachable(servers, timeout_s, exc) from exc


def _refused(conf: Mapping[str, Any], cause: StartupCause, detail: str) -> KafkaRefused:
    """The error of a refused start: servers, protocol, mechanism and user; no secret."""
    secrets = [str(conf[key]) for key in _SECRET_KEYS if conf.get(key)]
    if any(secret in detail for secret in secrets):  # librdkafka does not print them
        detail = "detail withheld: it contains a secret"
    return KafkaRefused(
        f"Kafka at {conf.get('bootstrap.servers', '')} refused the writer: {_ADVICE[cause]} "
        f"({detail or 'no detail from the client'})",
        security_protocol=conf.get("security.protocol"),
        sasl_mechanism=conf.get("sasl.mechanism"),
        sasl_username=conf.get("sasl.username") or conf.get("sasl.oauthbearer.client.id"),
    )


def _unreachable(servers: str, timeout_s: float, exc: Exception) -> KafkaUnreachable:
    """The error of a cluster that did not answer within ``timeout_s``."""
    reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
    return KafkaUnreachable(
        f"Kafka at {servers} did not answer within {timeout_s:g} s ({reason}); check "
        f"KAFKA_BOOTSTRAP_SERVERS and the network, or raise {CONNECT_TIMEOUT_ENV}"
    )
