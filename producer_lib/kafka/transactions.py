"""Kafka transaction calls with librdkafka's three kinds of error handled.

A failed transactional call raises ``KafkaException`` whose ``KafkaError`` says what to do:

- ``retriable()``: call it again (bounded here by ``attempts`` with a short back-off);
- ``txn_requires_abort()``: abort the transaction; the data must be produced again;
- ``fatal()`` (or anything else): the producer is unusable and must be recreated.

:func:`call_transactional` runs one call with that policy and raises
:class:`TransactionFailed` (a :class:`~producer_lib.errors.ProduceError`) carrying the kind,
so the producer can abort or mark itself broken.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from producer_lib.errors import KafkaUnavailable, ProduceError

__all__ = [
    "ClientErrors",
    "ConnectionRefused",
    "ErrorKind",
    "LibrdkafkaLog",
    "StartupCause",
    "TransactionFailed",
    "call_transactional",
    "classify",
    "classify_startup_errors",
    "is_fenced",
    "start_transactional",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
ErrorKind = Literal["retriable", "abortable", "fatal"]
_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
RETRY_BACKOFF_S = 0.5  # a coordinator moving or loading: give it a moment, not a busy loop


class TransactionFailed(ProduceError):
    """A transactional call failed; ``kind`` says whether to abort or recreate the producer.

    Attributes:
        kind: ``"retriable"`` (retries exhausted), ``"abortable"`` or ``"fatal"``.
    """

    kind: ErrorKind
    code: int | None = None

    @property
    def fenced(self) -> bool:
        """True when a newer producer with the same transactional id took over."""
        return self.code in _FENCED_CODES


def classify(error: KafkaError) -> ErrorKind:
    """Which of librdkafka's three kinds a transactional error is."""
    if error.fatal():
        return "fatal"
    if error.txn_requires_abort():
        return "abortable"
    if error.retriable():
        return "retriable"
    return "fatal"


def _next_step(kind: ErrorKind) -> str:
    return {
        "retriable": "the cluster did not answer in time; check it and run again",
        "abortable": "the transaction was aborted; run the load again",
        "fatal": "the producer is unusable (fenced by a newer instance, or misconfigured); "
        "create a new KafkaProducer",
    }[kind]


def call_transactional(
    operation: str,
    call: Callable[[], T],
    *,
    attempts: int = 3,
    **context: Any,
) -> T:
    """Run one transactional call, retrying retriable errors up to ``attempts`` times.

    Args:
        operation: Name of the call for messages (``commit_transaction``...).
        call: The call itself.
        attempts: Tries in all for retriable errors (1: no retry).
        **context: Error context (``transactional_id=``, ``topic=``...).

    Returns:
        What ``call`` returns.

    Raises:
        TransactionFailed: The call failed; its ``kind`` tells what to do next.
    """
    for attempt in range(1, attempts + 1):
        try:
            return _calling(call)
        except KafkaException as exc:
            error = _kafka_error(exc)
            kind: ErrorKind = classify(error) if error is not None else "fatal"
            if kind == "retriable" and attempt < attempts:
                log.warning(
                    "transaction call retried operation=%s attempt=%d error=%s",
                    operation,
                    attempt,
                    error,
                )
                time.sleep(RETRY_BACKOFF_S * attempt)
                continue
            failed = TransactionFailed(
                f"{operation} failed ({kind}): {error or exc}; {_next_step(kind)}",
                operation=operation,
                **context,
            )
            failed.kind = kind
            failed.code = error.code() if error is not None else None
            raise failed from exc
    raise AssertionError("unreachable")  # pragma: no cover


def is_fenced(exc: BaseException) -> bool:
    """True when ``exc``, or an exception it was raised from, says the producer was fenced."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TransactionFailed) and seen.fenced:
            return True
        error = _kafka_error(seen)
        if error is not None and error.code() in _FENCED_CODES:
            return True
        seen = seen.__cause__
    return False


def _calling(call: Callable[[], T]) -> T:
    """``call()``, with a raw ``KafkaError`` raised by confluent-kafka made a KafkaException.

    A transactional producer's ``flush`` that meets a fatal error (fenced) raises the
    ``KafkaError`` object itself, which is no exception class: only a bare ``except`` sees
    it, and it would pass every ``except Exception`` up to the interpreter.
    """
    try:
        return call()
    except KafkaException:
        raise
    except:  # noqa: E722 - the only clause that matches a raised non-exception object
        raised = sys.exc_info()[1]
        if isinstance(raised, KafkaError):
            raise KafkaException(raised) from None
        raise


def _kafka_error(exc: object) -> KafkaError | None:
    """The KafkaError of a KafkaException, or the error itself when that was raised."""
    if isinstance(exc, KafkaError):
        return exc
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], KafkaError) else None


StartupCause = Literal["authentication", "tls", "security_protocol", "unreachable"]
_CAUSE_BY_NAME: dict[str, StartupCause] = {
    "_AUTHENTICATION": "authentication",  # SASL handshake or credentials refused
    "SASL_AUTHENTICATION_FAILED": "authentication",
    "_SSL": "tls",
    "_TRANSPORT": "unreachable",  # refused, reset or timed out: unless the text says more
    "_ALL_BROKERS_DOWN": "unreachable",
    "_RESOLVE": "unreachable",
}
_CAUSE_BY_TEXT: tuple[tuple[str, StartupCause], ...] = (  # lower case, checked in order
    ("sasl authentication", "authentication"),
    ("authentication failed", "authentication"),
    ("mechanism handshake failed", "authentication"),  # SASL to a listener without it
    ("ssl handshake", "tls"),
    ("certificate verify failed", "tls"),
    ("incorrect security.protocol", "security_protocol"),
    ("disconnected while requesting apiversion", "security_protocol"),
)
_CAUSE_ORDER: tuple[StartupCause, ...] = (
    "authentication",
    "tls",
    "security_protocol",
    "unreachable",
)


def classify_startup_errors(errors: Iterable[tuple[str, str]]) -> StartupCause | None:
    """Why a client could not start, from librdkafka's errors (``error_cb``) meanwhile.

    Args:
        errors: ``(name, text)`` of each error, e.g. ``("_AUTHENTICATION", "SASL ...")``.

    Returns:
        The most telling cause seen (authentication before TLS before a protocol mismatch
        before an unreachable broker), or None when none of them was reported.
    """
    seen: set[StartupCause] = set()
    for name, text in errors:
        cause = _CAUSE_BY_NAME.get(name)
        lowered = text.lower()
        for needle, by_text in _CAUSE_BY_TEXT:
            if needle in lowered and (cause is None or cause == "unreachable"):
                cause = by_text
                break
        if cause is not None:
            seen.add(cause)
    return next((cause for cause in _CAUSE_ORDER if cause in seen), None)


class ClientErrors:
    """An ``error_cb`` that keeps librdkafka's latest errors as ``(name, text)``."""

    def __init__(self, keep: int = 50) -> None:
        self.errors: deque[tuple[str, str]] = deque(maxlen=keep)

    def __call__(self, error: KafkaError) -> None:
        """Keep one error (librdkafka calls this from ``poll``)."""
        self.errors.append((error.name(), error.str()))

    def last(self, cause: StartupCause) -> str:
        """Text of the latest error of ``cause``, or empty."""
        for name, text in reversed(self.errors):
            if classify_startup_errors([(name, text)]) == cause:
                return text
        return ""


class LibrdkafkaLog:
    """librdkafka's ``logger``: passes every line on and keeps the latest transaction error.

    When the broker fails a transaction (an ACL refusing a topic once the first message is
    queued, say), librdkafka purges the transaction's queued messages: their delivery
    reports only say ``_PURGE_QUEUE``. The cause is in librdkafka's ``TXNERR`` log line,
    which this keeps so the error a flow sees can name it.
    """

    def __init__(self, target: logging.Logger) -> None:
        self.target = target
        self.transaction_error = ""
        self.fatal_error = ""  # librdkafka's FATAL line: the producer is unusable from then on

    def log(self, level: int, fmt: str, *args: Any) -> None:
        """One librdkafka line: ``fmt`` is ``"%s [%s] %s"`` of facility, client and text."""
        if len(args) == 3 and args[0] in ("TXNERR", "FATAL"):
            text = str(args[2]).split("]: ", 1)[-1]  # drop "[thrd:main]: "
            if args[0] == "TXNERR":
                self.transaction_error = text
            else:
                self.fatal_error = text
        self.target.log(level, fmt, *args, stacklevel=2)

    @property
    def fenced(self) -> bool:
        """True once librdkafka has said the producer was fenced (a fatal error)."""
        return "fenced" in self.fatal_error.lower()


class ConnectionRefused(ProduceError):
    """The cluster refused the client: authentication, TLS, protocol or transactional id ACL.

    Not transient: running again with the same settings fails the same way.
    """


def start_transactional(conf: dict[str, Any], timeout_s: float, *, bootstrap: str) -> Producer:
    """A producer with ``conf`` whose ``init_transactions`` succeeded (fencing older ones).

    Raises:
        ConnectionRefused: Authentication failed, TLS failed, the security protocol does
            not match the listener (from librdkafka's errors meanwhile), or an ACL refuses
            the transactional id.
        KafkaUnavailable: The cluster did not answer within ``timeout_s`` or refused.
    """
    errors = ClientErrors()
    kafka = Producer({"error_cb": errors, **conf})
    transactional_id = conf["transactional.id"]
    try:
        call_transactional(
            "init_transactions",
            lambda: kafka.init_transactions(timeout_s),
            attempts=1,
            producer=transactional_id,
        )
    except TransactionFailed as exc:
        try:
            _calling(lambda: kafka.poll(0))  # serve the error callbacks queued meanwhile
        except KafkaException:
            pass  # poll raises the fatal error init_transactions has just reported
        kafka.purge()
        if exc.code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            raise ConnectionRefused(
                f"the cluster refused transactional id {transactional_id!r} ({exc.message}); "
                "grant the principal WRITE and DESCRIBE on it, usually as a prefixed "
                "TRANSACTIONAL_ID ACL of the flow",
                bootstrap_servers=bootstrap,
                sasl_username=conf.get("sasl.username") or conf.get("sasl.oauthbearer.client.id"),
                producer=transactional_id,
            ) from exc
        cause = classify_startup_errors(errors.errors)
        if cause in ("authentication", "tls", "security_protocol"):
            raise _refused(cause, errors.last(cause), conf, transactional_id) from exc
        raise KafkaUnavailable(
            f"cannot start a transactional producer within {timeout_s:g} s: {exc.message}; "
            "is the cluster reachable and are the settings right?",
            bootstrap_servers=bootstrap,
            producer=transactional_id,
        ) from exc
    return kafka


_ADVICE: dict[StartupCause, str] = {
    "authentication": "authentication failed: check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD "
    "and KAFKA_SASL_MECHANISM, and that KAFKA_SECURITY_PROTOCOL matches the listener",
    "tls": "the TLS handshake failed: check KAFKA_SSL_CA_LOCATION and that "
    "KAFKA_SECURITY_PROTOCOL matches the listener",
    "security_protocol": "the listener does not speak KAFKA_SECURITY_PROTOCOL: check it "
    "(SSL vs PLAINTEXT, SASL_ vs not) against the cluster's listener",
    "unreachable": "the cluster is unreachable",
}
_SECRET_KEYS = ("sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password")


def _refused(
    cause: StartupCause, text: str, conf: dict[str, Any], transactional_id: str
) -> ConnectionRefused:
    """The error of a refused start, naming servers, protocol, mechanism and user only."""
    secrets = [str(conf[key]) for key in _SECRET_KEYS if conf.get(key)]
    if any(secret in text for secret in secrets):  # librdkafka does not print them; be sure
        text = "detail withheld: it contains a secret"  # a mask would show where it matched
    return ConnectionRefused(
        f"{_ADVICE[cause]} ({text or 'no detail from the client'})",
        bootstrap_servers=conf.get("bootstrap.servers"),
        security_protocol=conf.get("security.protocol"),
        sasl_mechanism=conf.get("sasl.mechanism"),
        sasl_username=conf.get("sasl.username") or conf.get("sasl.oauthbearer.client.id"),
        producer=transactional_id,
    )
