"""Transaction error policy: retry retriable, abort abortable, give up on fatal."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from producer_lib.errors import ProduceError
from producer_lib.kafka import transactions
from producer_lib.kafka.transactions import TransactionFailed, call_transactional, classify


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
