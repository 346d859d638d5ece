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
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from producer_lib.errors import KafkaUnavailable, ProduceError

__all__ = [
    "ErrorKind",
    "TransactionFailed",
    "call_transactional",
    "classify",
    "start_transactional",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
ErrorKind = Literal["retriable", "abortable", "fatal"]
_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                           KafkaError.INVALID_PRODUCER_EPOCH})  # fmt: skip
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
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            kind: ErrorKind = classify(error) if error is not None else "fatal"
            if kind == "retriable" and attempt < attempts:
                log.warning(
                    "transaction call retried operation=%s attempt=%d error=%s",
                    operation, attempt, error,
                )  # fmt: skip
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


def start_transactional(conf: dict[str, Any], timeout_s: float, *, bootstrap: str) -> Producer:
    """A producer with ``conf`` whose ``init_transactions`` succeeded (fencing older ones).

    Raises:
        KafkaUnavailable: The cluster did not answer within ``timeout_s`` or refused.
    """
    kafka = Producer(conf)
    transactional_id = conf["transactional.id"]
    try:
        call_transactional("init_transactions", lambda: kafka.init_transactions(timeout_s),
                           attempts=1, producer=transactional_id)  # fmt: skip
    except TransactionFailed as exc:
        kafka.purge()
        raise KafkaUnavailable(
            f"cannot start a transactional producer within {timeout_s:g} s: {exc.message}; "
            "is the cluster reachable and are the settings right?",
            bootstrap_servers=bootstrap, producer=transactional_id,
        ) from exc
    return kafka
