"""Transaction error policy: retry retriable, abort abortable, give up on fatal."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from producer_lib.errors import ProduceError
from producer_lib.kafka import transactions
from producer_lib.kafka._ledger import TransactionLedger
from producer_lib.kafka.transactions import (
    LibrdkafkaLog,
    TransactionFailed,
    call_transactional,
    classify,
)


def _error(**flags) -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, "x", **flags)


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        pytest.param({"retriable": True}, "retriable", id="retriable"),
        pytest.param({"txn_requires_abort": True}, "abortable", id="abortable"),
        pytest.param({"fatal": True}, "fatal", id="fatal"),
        pytest.param({}, "fatal", id="unclassified"),
    ],
)
def test_classify(flags, kind):
    assert classify(_error(**flags)) == kind


def test_retriable_is_retried_then_succeeds(monkeypatch):
    monkeypatch.setattr(transactions, "RETRY_BACKOFF_S", 0)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(_error(retriable=True))
        return "ok"

    assert call_transactional("commit_transaction", flaky, attempts=3) == "ok"
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("flags", "kind", "calls"),
    [
        pytest.param({"retriable": True}, "retriable", 2, id="retries-exhausted"),
        pytest.param({"txn_requires_abort": True}, "abortable", 1, id="abortable-not-retried"),
        pytest.param({"fatal": True}, "fatal", 1, id="fatal-not-retried"),
    ],
)
def test_failures_carry_their_kind(monkeypatch, flags, kind, calls):
    monkeypatch.setattr(transactions, "RETRY_BACKOFF_S", 0)
    made = []

    def failing():
        made.append(1)
        raise KafkaException(_error(**flags))

    with pytest.raises(TransactionFailed) as info:
        call_transactional("commit_transaction", failing, attempts=2, producer="p")
    assert isinstance(info.value, ProduceError)
    assert info.value.kind == kind and info.value.producer == "p"
    assert len(made) == calls


class _Lines(logging.Logger):
    def __init__(self) -> None:
        super().__init__("lines")
        self.lines: list[str] = []

    def log(self, level, msg, *args, **kwargs):  # type: ignore[override]
        self.lines.append(msg % args)


def test_librdkafka_log_keeps_the_transaction_error_and_passes_every_line_on():
    target = _Lines()
    watch = LibrdkafkaLog(target)
    text = "[thrd:main]: Current transaction failed: Broker: Topic authorization failed"
    watch.log(logging.INFO, "%s [%s] %s", "BROKER", "rdkafka#producer-1", "[thrd:app]: up")
    assert watch.transaction_error == ""
    watch.log(logging.ERROR, "%s [%s] %s", "TXNERR", "rdkafka#producer-1", text)
    assert (
        watch.transaction_error == "Current transaction failed: Broker: Topic authorization failed"
    )
    assert target.lines == [
        "BROKER [rdkafka#producer-1] [thrd:app]: up",
        f"TXNERR [rdkafka#producer-1] {text}",
    ]
    assert not watch.fenced
    fatal = "[thrd:main]: Fatal error: Local: This instance has been fenced by a newer instance"
    watch.log(logging.CRITICAL, "%s [%s] %s", "FATAL", "rdkafka#producer-1", fatal)
    assert watch.fenced and watch.fatal_error.startswith("Fatal error: Local")


class _Message:
    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 0


def _failed_ledger(*codes: int) -> TransactionLedger:
    ledger = TransactionLedger(transaction_time=1)
    ledger.count("orders", "ERP.ORDERS", {0: len(codes)})
    for code in codes:
        ledger.on_delivery(KafkaError(code), _Message())  # type: ignore[arg-type]
    return ledger


def test_purged_messages_are_reported_with_the_transaction_error_that_purged_them():
    ledger = _failed_ledger(KafkaError._PURGE_QUEUE, KafkaError._PURGE_QUEUE)
    with pytest.raises(ProduceError, match=r"transaction failed \(Topic authorization failed\)"):
        ledger.check("Topic authorization failed")
    with pytest.raises(ProduceError, match="2 message.s. failed: topic=orders"):
        ledger.check("")  # no cause known: the delivery errors themselves


def test_a_message_failing_on_its_own_is_reported_as_such():
    ledger = _failed_ledger(KafkaError._PURGE_QUEUE, KafkaError.MSG_SIZE_TOO_LARGE)
    with pytest.raises(ProduceError, match="2 message.s. failed: topic=orders"):
        ledger.check("Topic authorization failed")
