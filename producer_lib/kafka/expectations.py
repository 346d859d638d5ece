"""The expectations of a table, acted on before its rows are produced.

:func:`check_before_export` runs the check (:mod:`producer_lib.staging.expectations`) on
what ``produce_from_duckdb`` is about to read, for the row types that carry a row's image
(INSERT, UPDATE, UPSERT, REPLACE); :func:`act_on` acts on its report: a ``fail`` expectation
with a failing row raises :class:`~producer_lib.errors.ExpectationFailed`, ``warn`` and
``drop`` log (the report's ``kept_sql`` is what the export then reads).
:func:`send_rejected` produces the dropped rows to ``_rejected_rows`` in the export's
transaction, framed and encoded exactly as the data topic would carry them, with
headers that say where they were going and why (``docs/WIRE.md``)::

    flow.topic        the data topic the row was meant for
    flow.table        <namespace>.<name> of its value schema
    flow.function     the flow function that dropped it
    flow.expectations the names of the drop expectations it failed, comma-separated
    flow.reason       the same with their SQL: "amount_positive: "AMOUNT" >= 0; ..."
"""

from __future__ import annotations

import logging

import duckdb
import pyarrow as pa
from confluent_kafka import Producer

from producer_lib.errors import ExpectationFailed
from producer_lib.kafka._encode import Constants, encode_batch
from producer_lib.kafka._ledger import TransactionLedger
from producer_lib.kafka._send import QUEUE_FULL_WAIT_S, EncodedBatch
from producer_lib.kafka._target import Target
from producer_lib.kafka.topics import REJECTED_ROWS_TOPIC
from producer_lib.schema.row_types import RowType
from producer_lib.staging.expectations import (
    FAILED_COLUMN,
    ExpectationReport,
    check_expectations,
)

__all__ = [
    "CHECKED_ROW_TYPES",
    "REJECTED_TABLE",
    "act_on",
    "check_before_export",
    "send_rejected",
]

# Rows that land as the table's rows; deletes, before-images and truncates are not checked.
CHECKED_ROW_TYPES = frozenset({RowType.INSERT, RowType.UPDATE, RowType.UPSERT, RowType.REPLACE})
REJECTED_TABLE = "_rejected"  # the rejected rows' table in the ledger and the commit record


def check_before_export(
    connection: duckdb.DuckDBPyConnection,
    table_or_query: str,
    target: Target,
    row_type: RowType,
    flow: str,
    log: logging.Logger,
) -> ExpectationReport | None:
    """Check the target's expectations on the export's rows; None when none apply.

    Raises:
        SchemaError: DuckDB refuses a predicate.
    """
    expectations = target.value_schema.expectations
    if not expectations or RowType(row_type) not in CHECKED_ROW_TYPES:
        return None
    return check_expectations(
        connection, table_or_query, expectations, table=target.table, flow=flow
    )


def act_on(report: ExpectationReport, target: Target, flow: str, log: logging.Logger) -> None:
    """Fail on a failed ``fail`` expectation; log the failed ``warn`` and ``drop`` ones.

    Raises:
        ExpectationFailed: A ``fail`` expectation has failing rows (names flow, table,
            topic, the expectation, its SQL and the counts).
    """
    for count in report.failed("fail"):
        raise ExpectationFailed(
            f"{count.failed} of {report.rows_checked} row(s) failed expectation "
            f"{count.expectation.name!r} ({count.expectation.sql}); nothing of the export "
            "was produced",
            flow=flow,
            table=target.table,
            topic=target.topic,
            expectation=count.expectation.name,
            failed_rows=count.failed,
            rows_checked=report.rows_checked,
        )
    for count in [*report.failed("warn"), *report.failed("drop")]:
        log.warning(
            "expectation failed flow=%s table=%s expectation=%s action=%s failed=%d checked=%d",
            flow,
            target.table,
            count.expectation.name,
            count.expectation.action,
            count.failed,
            report.rows_checked,
        )


def send_rejected(
    kafka: Producer,
    ledger: TransactionLedger,
    target: Target,
    rows: pa.Table,
    constants: Constants,
    flow: str,
) -> int:
    """Produce ``rows`` (with :data:`FAILED_COLUMN`) to ``_rejected_rows``; return how many.

    Every row gets a delivery report (rejected rows are few), so the ledger knows the
    topic's offsets for the commit record, as for any partition of the transaction.
    """
    if not rows.num_rows:
        return 0
    failed = rows.column(FAILED_COLUMN).to_pylist()
    sql = {e.name: e.sql for e in target.value_schema.expectations}
    encoded = EncodedBatch.from_buffers(encode_batch(target.encoding, rows, constants, 0), rows)
    common = (("flow.topic", target.topic), ("flow.table", target.table), ("flow.function", flow))
    for row, names in enumerate(failed):
        key_bytes, value_bytes = _row_bytes(encoded, row)
        headers: list[tuple[str, str | bytes | None]] = [
            *common,
            ("flow.expectations", ",".join(names)),
            ("flow.reason", "; ".join(f"{name}: {sql[name]}" for name in names)),
        ]
        _produce(kafka, value_bytes, key_bytes, headers, ledger)
    ledger.count(REJECTED_ROWS_TOPIC, REJECTED_TABLE, {0: rows.num_rows})
    return rows.num_rows


def _row_bytes(batch: EncodedBatch, row: int) -> tuple[bytes, bytes]:
    keys, values = batch.key_offsets, batch.value_offsets
    return batch.keys[keys[row] : keys[row + 1]], batch.values[values[row] : values[row + 1]]


def _produce(
    kafka: Producer,
    value: bytes,
    key: bytes,
    headers: list[tuple[str, str | bytes | None]],
    ledger: TransactionLedger,
) -> None:
    while True:
        try:
            kafka.produce(
                REJECTED_ROWS_TOPIC,
                value,
                key,
                partition=0,
                on_delivery=ledger.on_delivery,
                headers=headers,
            )
            return
        except BufferError:
            kafka.poll(QUEUE_FULL_WAIT_S)
