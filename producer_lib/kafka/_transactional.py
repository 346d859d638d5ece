"""The transactional half of the producer: lifecycle, transactions, system records, hooks.

:class:`TransactionalProducer` owns the librdkafka producer and the open transaction: it
starts (fencing older instances of its transactional id), begins a transaction at the first
record, produces system records (``_execution_log``, ``_lineage``), runs commit hooks and
writes the ``_commits`` record at commit, and aborts on any error. The data half (targets,
encoding, rows) is :class:`~producer_lib.kafka.producer.KafkaProducer`, its subclass.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from producer_lib.errors import ProduceError
from producer_lib.kafka._ledger import CommitHook, PendingCommit, TransactionLedger
from producer_lib.kafka.config import producer_config
from producer_lib.kafka.topics import COMMITS_TOPIC, COMPACTED, ensure_topic
from producer_lib.kafka.transactions import (
    LibrdkafkaLog,
    TransactionFailed,
    call_transactional,
    is_fenced,
    start_transactional,
)
from producer_lib.settings import KafkaSettings

__all__ = ["TransactionalProducer"]

log = logging.getLogger("producer_lib.kafka.producer")

MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes (key, value, overhead)
_COMMIT_ATTEMPTS = 3  # retriable commit/abort errors (coordinator moving): then give up


class TransactionalProducer:
    """Lifecycle and transactions of a producer (a context manager); see the module doc.

    Args:
        source_system: The source system, in the ``_commits`` record.
        function_name: The flow function; part of the transactional id.
        zone: Data zone (e.g. ``bronze``); part of the transactional id.
        environment: Deployment environment (e.g. ``dev``); part of the transactional id.
        kafka_settings: The cluster and client settings.
        logger: Where the producer logs.
        instance: Tells apart parallel instances of one function.
    """

    def __init__(
        self,
        source_system: str,
        function_name: str,
        zone: str,
        environment: str,
        kafka_settings: KafkaSettings,
        logger: logging.Logger | None = None,
        *,
        instance: str = "0",
    ) -> None:
        self.source_system = source_system
        self.function_name = function_name
        self.transactional_id = f"{environment}.{zone}.{function_name}.{instance}"
        self._settings = kafka_settings
        self._log = logger or log
        self._kafka: Producer | None = None
        self._admin: AdminClient | None = None
        self._ledger: TransactionLedger | None = None
        self._last_time = 0
        self._state = "new"  # new -> open -> closed | broken
        self._broken_reason = ""
        self._failure: _Failure | None = None  # an error aborted a transaction: see _usable()
        self._max_message_bytes = MESSAGE_MAX_BYTES
        self._environment_zone = (environment, zone)
        self._commit_hooks: list[CommitHook] = []
        self._system_topics: set[str] = set()
        self._holds = 0  # detached runs using the producer: see hold()
        self._deferred_exit: tuple[Any, ...] | None = None
        self._librdkafka_log: LibrdkafkaLog | None = None  # names why a transaction failed
        self._instance = instance
        self.timed_out = False  # the broker aborted a transaction that was open too long

    @property
    def settings(self) -> KafkaSettings:
        """The cluster and client settings this producer was built with."""
        return self._settings

    @property
    def is_open(self) -> bool:
        """True between entering the ``with`` block and leaving (or breaking) it."""
        return self._state == "open"

    def set_instance(self, instance: str) -> None:
        """Choose the instance part of the transactional id, before the producer starts.

        Runs that must fence each other (one function, dataflow and partition) use one
        instance; the FunctionRunner sets it per run.

        Raises:
            ProduceError: The producer has already started.
        """
        if self._state != "new":
            raise ProduceError(
                "set_instance() must come before the with block", producer=self.transactional_id
            )
        environment, zone = self._environment_zone
        self.transactional_id = f"{environment}.{zone}.{self.function_name}.{instance}"
        self._instance = instance

    def successor(self) -> Self:
        """A new producer with this one's transactional id and settings, not started.

        For a producer broken by a transaction timeout (:attr:`timed_out`): no other
        instance fenced it, so a successor fences nobody.
        """
        environment, zone = self._environment_zone
        return type(self)(
            self.source_system,
            self.function_name,
            zone,
            environment,
            self._settings,
            self._log,
            instance=self._instance,
        )

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        """Connect, fence older instances and get ready to produce.

        Raises:
            ProduceError: The cluster is unreachable within ``connect_timeout_s`` or refuses.
        """
        if self._state != "new":
            raise ProduceError(
                "a KafkaProducer can be entered once; create a new one",
                producer=self.transactional_id,
            )
        conf = producer_config(self._settings, self.transactional_id)
        self._librdkafka_log = conf["logger"]
        self._max_message_bytes = int(conf.get("message.max.bytes", MESSAGE_MAX_BYTES))
        timeout = self._settings.connect_timeout_s
        kafka = start_transactional(conf, timeout, bootstrap=self._settings.bootstrap_servers)
        self._kafka, self._admin, self._state = kafka, AdminClient(conf), "open"
        ensure_topic(
            self._admin,
            COMMITS_TOPIC,
            1,
            timeout_s=timeout,
            replication_factor=self._settings.topic_replication_factor,
        )
        self._log.info(
            "producer ready producer=%s %s", self.transactional_id, self._settings.describe()
        )
        return self

    def hold(self) -> None:
        """Keep the producer open past its ``with`` block until :meth:`release`.

        A run that goes on after its HTTP request answered (202, see
        :mod:`producer_lib.runner.runs`) holds the producer the caller's ``with`` block
        opened: leaving that block then does not close it, the close waits for the run.
        """
        self._holds += 1

    def release(self) -> None:
        """End one :meth:`hold`; after the last, do the close a ``with`` block deferred.

        Never raises: what the deferred close reports (rows left uncommitted) is logged.
        """
        self._holds = max(0, self._holds - 1)
        if self._holds or self._deferred_exit is None:
            return
        exit_args, self._deferred_exit = self._deferred_exit, None
        try:
            self._exit_now(*exit_args)
        except ProduceError as exc:
            self._log.error("deferred close of producer=%s: %s", self.transactional_id, exc)

    @property
    def is_held(self) -> bool:
        """True while a detached run holds the producer (see :meth:`hold`)."""
        return self._holds > 0

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Abort an open transaction and close; leaving with uncommitted rows is an error.

        While a run holds the producer (:meth:`hold`) the close is deferred to its
        :meth:`release`.

        Raises:
            ProduceError: The block ended normally but rows were produced and not committed.
        """
        if self._holds:
            self._deferred_exit = (exc_type, exc, tb)
            self._log.info(
                "producer=%s stays open for the run that holds it; it closes when that run ends",
                self.transactional_id,
            )
            return
        self._exit_now(exc_type, exc, tb)

    def _exit_now(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        left_open = self._ledger is not None and self._state == "open"
        failure = self._failure if self._state == "open" else None
        if left_open:
            self._abort("left the with block" if exc is None else type(exc).__name__)
        self._close()
        if left_open and exc is None:
            raise ProduceError(
                "rows were produced but not committed; call commit() before "
                "leaving the with block (they were aborted)",
                producer=self.transactional_id,
            )
        if failure is not None and exc is None:  # the flow caught it: say what it lost
            self._log.warning(
                "closed after an error aborted a transaction and no abort() "
                "followed producer=%s error=%s",
                self.transactional_id,
                failure.cause,
            )

    def _close(self) -> None:
        kafka, self._kafka = self._kafka, None
        if kafka is not None and self._state == "open":
            kafka.flush(self._settings.connect_timeout_s)
        if self._state != "broken":
            self._state = "closed"
        if kafka is not None:  # now, not when the last reference (a traceback's) goes
            with warnings.catch_warnings():  # a fenced producer's abort fails; logged already
                warnings.simplefilter("ignore", RuntimeWarning)
                kafka.close()

    def _require_open(self) -> Producer:
        if self._state == "open" and self._kafka is not None:
            return self._kafka
        reason = {
            "new": "the producer is not started; use it in a with block",
            "closed": "the producer is closed; create a new KafkaProducer",
            "broken": f"the producer is unusable ({self._broken_reason}); create a new one",
        }[self._state]
        raise ProduceError(reason, producer=self.transactional_id)

    def _usable(self) -> Producer:
        """The open producer, unless an error aborted a transaction the flow did not abort.

        A flow that caught that error and went on would otherwise commit only the rows
        after it (a TRUNCATE and the rows before it gone), so every produce and commit
        refuses until the flow calls :meth:`abort` or creates a new producer.
        """
        kafka = self._require_open()
        if self._failure is not None:
            raise self._failure.error(self.transactional_id)
        return kafka

    def check_usable(self) -> None:
        """Raise what produce and commit would raise now, if anything.

        Raises:
            ProduceError: The producer is not open, or an error aborted a transaction and
                nobody called :meth:`abort` since.
        """
        self._usable()

    def _begin(self) -> TransactionLedger:
        kafka = self._usable()
        if self._ledger is None:
            self._run_txn("begin_transaction", kafka.begin_transaction)
            if self._librdkafka_log is not None:
                self._librdkafka_log.transaction_error = ""
            now = time.time_ns() // 1000
            self._ledger = TransactionLedger(max(now, self._last_time + 1))
            self._last_time = self._ledger.transaction_time
        return self._ledger

    def produce_system_record(self, topic: str, key: bytes, value: bytes) -> None:
        """Produce a record of a system topic (``_execution_log``, ``_lineage``...).

        It joins the open transaction, beginning one if none is open. The topic is created
        on first use: one partition, compacted (the latest record per key is what counts).
        System records are not data rows: a transaction holding only them commits without
        a ``_commits`` record.

        Raises:
            ProduceError: Closed producer, the topic cannot be created, or an earlier error
                aborted the transaction (see :meth:`abort`).
        """
        self._usable()
        self._system_topic(topic, COMPACTED)
        ledger = self._begin()
        assert self._kafka is not None
        with self._aborting_on_error(topic=topic):
            self._kafka.produce(topic, value, key)
            ledger.system_records += 1

    def _system_topic(self, topic: str, config: dict[str, str]) -> None:
        """Create the system topic ``topic`` (one partition, ``config``) on its first use."""
        if topic not in self._system_topics:
            assert self._admin is not None
            ensure_topic(
                self._admin,
                topic,
                1,
                config=config,
                replication_factor=self._settings.topic_replication_factor,
                timeout_s=self._settings.connect_timeout_s,
            )
            self._system_topics.add(topic)

    def add_commit_hook(self, hook: CommitHook) -> None:
        """Call ``hook(pending)`` inside every commit, before the ``_commits`` record.

        A hook adds records to the transaction with :meth:`produce_system_record` (the
        FunctionRunner writes its execution log and lineage this way, so they become
        visible exactly with the data). An exception in a hook aborts the transaction.
        """
        self._commit_hooks.append(hook)

    def remove_commit_hook(self, hook: CommitHook) -> None:
        """Stop calling ``hook`` (no error when it was not added)."""
        if hook in self._commit_hooks:
            self._commit_hooks.remove(hook)

    # -- transactions ---------------------------------------------------------------------

    def commit(self) -> str | None:
        """Write the ``_commits`` record and commit the open transaction.

        Returns:
            The commit id, or None when nothing was produced since the last commit.

        Raises:
            ProduceError: A message or the commit failed; the transaction was aborted (or,
                when the error is fatal, the producer must be recreated). Also when an
                earlier error aborted the transaction and the flow went on without
                :meth:`abort`: nothing is committed then.
        """
        kafka = self._usable()
        ledger = self._ledger
        if ledger is None:
            self._log.info("nothing to commit producer=%s", self.transactional_id)
            return None
        commit_id = str(uuid.uuid4())
        started = time.monotonic()
        with self._aborting_on_error():
            flush_s = self._settings.transaction_timeout_ms / 1000
            remaining = self._run_txn("flush", lambda: kafka.flush(flush_s))
            flushed = time.monotonic()
            if remaining:
                raise ProduceError(
                    f"{remaining} message(s) not delivered in time", producer=self.transactional_id
                )
            ledger.check(self._librdkafka_log.transaction_error if self._librdkafka_log else "")
            ledger.truncated = self._take_truncations()
            pending = PendingCommit(commit_id, ledger)
            for hook in list(self._commit_hooks):
                hook(pending)
            if ledger.rows:  # only data transactions get a commit record
                record = ledger.commit_record(
                    commit_id=commit_id,
                    producer=self.transactional_id,
                    source_system=self.source_system,
                    function_name=self.function_name,
                )
                kafka.produce(COMMITS_TOPIC, json.dumps(record).encode(), commit_id.encode(), 0)
            timeout = self._settings.transaction_timeout_ms / 1000
            self._run_txn("commit_transaction", lambda: kafka.commit_transaction(timeout))
        self._ledger = None
        for table, columns in ledger.truncated.items():
            self._log.warning(
                "text truncated (opt-in) producer=%s commit_id=%s table=%s truncated=%s",
                self.transactional_id,
                commit_id,
                table,
                columns,
            )
        self._log.info(
            "committed producer=%s commit_id=%s transaction_time=%d rows=%d flush_s=%.2f "
            "commit_s=%.2f",
            self.transactional_id,
            commit_id,
            ledger.transaction_time,
            ledger.rows,
            flushed - started,  # the rows still queued in librdkafka reach the broker
            time.monotonic() - flushed,  # hooks, the _commits record, the commit itself
        )
        pending.committed()
        return commit_id

    @property
    def has_open_transaction(self) -> bool:
        """True when rows were produced since the last commit or abort."""
        return self._ledger is not None

    def abort(self, reason: str = "aborted by the caller") -> None:
        """Abort the open transaction, if any: none of its rows become visible.

        Also acknowledges an error that aborted a transaction: the producer accepts rows
        again, in a fresh transaction (produce everything of it again, TRUNCATE included).
        """
        self._failure = None
        self._abort(reason)

    def _run_txn(self, operation: str, call: Any) -> Any:
        try:
            return call_transactional(
                operation, call, attempts=_COMMIT_ATTEMPTS, producer=self.transactional_id
            )
        except TransactionFailed as exc:
            if exc.kind == "fatal":
                self._state, self._broken_reason = "broken", exc.message
            raise

    @contextmanager
    def _aborting_on_error(self, **context: Any) -> Iterator[None]:
        """Any exception inside aborts the open transaction, then propagates.

        The first error that aborts an open transaction is kept (with ``context``, e.g.
        ``topic=``, ``table=``): produce and commit refuse until :meth:`abort`.
        """
        try:
            yield
        except BaseException as exc:
            timed_out = self._timed_out(exc)
            error = timed_out or exc
            if self._failure is None and self._state == "open" and self._lost_records():
                self._failure = _Failure(error, context)
            self._abort(f"{type(error).__name__}: {error}")
            if timed_out is not None:
                self._state, self._broken_reason = "broken", timed_out.message
                self.timed_out = True
                raise timed_out from exc
            raise

    def _timed_out(self, exc: BaseException) -> ProduceError | None:
        """The error to raise when ``exc`` is the broker aborting a transaction open too long.

        The coordinator aborts a transaction older than ``transaction.timeout.ms`` and bumps
        the producer's epoch: librdkafka then reports the producer as fenced "by a newer
        instance", which is not what happened when no other instance runs. The fencing is in
        ``exc``, or only in librdkafka's log: confluent-kafka's ``flush`` may then raise a
        bare ``SystemError`` ("returned NULL without setting an exception").
        """
        ledger, limit_ms = self._ledger, self._settings.transaction_timeout_ms
        logged = self._librdkafka_log is not None and self._librdkafka_log.fenced
        if ledger is None or not (is_fenced(exc) or logged):
            return None
        open_ms = (time.time_ns() // 1000 - ledger.transaction_time) / 1000
        if open_ms < limit_ms:
            return None
        return ProduceError(
            f"the transaction was open {open_ms / 1000:.0f} s, longer than its timeout "
            f"(KAFKA_TRANSACTION_TIMEOUT_MS={limit_ms}), so the broker aborted it: nothing "
            "of it is visible. Raise KAFKA_TRANSACTION_TIMEOUT_MS (up to the broker's "
            "transaction.max.timeout.ms, 15 min by default) or make the load faster",
            producer=self.transactional_id,
            rows=ledger.rows,
        )

    def _lost_records(self) -> bool:
        """True when the open transaction holds records an abort would lose."""
        ledger = self._ledger
        return ledger is not None and bool(ledger.rows or ledger.system_records)

    def _take_truncations(self) -> dict[str, dict[str, int]]:
        """Text values cut since the last take, per table and column (targets know them)."""
        return {}

    def _abort(self, reason: str) -> None:
        """Abort the open transaction; log (not raise) when even that fails."""
        ledger, self._ledger = self._ledger, None
        self._take_truncations()  # the aborted rows' cuts are not counted
        if ledger is None or self._kafka is None or self._state != "open":
            return
        kafka, timeout = self._kafka, self._settings.transaction_timeout_ms / 1000
        try:
            self._run_txn("abort_transaction", lambda: kafka.abort_transaction(timeout))
            self._log.warning(
                "transaction aborted producer=%s reason=%s rows=%d",
                self.transactional_id,
                reason,
                ledger.rows,
            )
        except TransactionFailed as exc:
            self._state, self._broken_reason = "broken", exc.message
            self._log.error("abort failed producer=%s error=%s", self.transactional_id, exc)


class _Failure:
    """The error that aborted a transaction the flow did not abort, and where it happened."""

    def __init__(self, exc: BaseException, context: dict[str, Any]) -> None:
        self.cause = f"{type(exc).__name__}: {exc}"
        self.context = {k: v for k, v in context.items() if v is not None}

    def error(self, producer: str) -> ProduceError:
        """The error every produce and commit raises until ``abort()``."""
        return ProduceError(
            f"an earlier error aborted the open transaction ({self.cause}); nothing of it "
            "was committed, and rows produced after it must not commit without it. Call "
            "producer.abort() and produce the whole transaction again (TRUNCATE included), "
            "or create a new producer",
            producer=producer,
            **self.context,
        )
