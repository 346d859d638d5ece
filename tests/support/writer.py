"""Helpers for the lakehouse writer tests: schemas, decoded-row DataFrames, framed messages."""

from __future__ import annotations

import functools
import io
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fastavro
from confluent_kafka import Producer

from producer_lib.schema import (
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    KeySchema,
    ValueSchema,
    schema_fingerprint,
    single_object_header,
)
from producer_lib.schema.value_schema import TECHNICAL_FIELDS

T0 = 1_700_000_000_000_000  # µs; transaction times in tests are T0 + n


def sample_schema(name: str = "ORDERS", namespace: str = "SHOP", keyed: bool = True) -> ValueSchema:
    """A small table: ID (key), NAME, REGION, AMOUNT, with governance metadata."""
    schema = ValueSchema(name, namespace, doc="orders of the shop")
    schema.add_field("ID", AvroLong(), doc="order id", nullable=False)
    schema.add_field("NAME", AvroNVarchar(40), doc="customer name")
    schema.add_field("REGION", AvroNVarchar(10))
    schema.add_field("AMOUNT", AvroDecimal(10, 2))
    if keyed:
        schema.add_primary_key("ID")
    schema.set_data_product_owner_email("owner@example.com")
    return schema


def _ddl(schema: ValueSchema) -> str:
    parts = []
    for f in [*schema.fields.values(), *TECHNICAL_FIELDS]:
        kind = "BIGINT" if f.name == "__change_time" else f.type.to_spark()
        parts.append(f"`{f.name}` {kind}")
    return ", ".join([*parts, "topic STRING", "partition INT", "offset BIGINT"])


def rows_df(spark: Any, schema: ValueSchema, rows: Sequence[Mapping[str, Any]]) -> Any:
    """A DataFrame of decoded rows (as read.py yields them) from dicts.

    Each dict holds payload values by original name, ``t`` (µs offset from T0) or
    ``__change_time`` (µs), ``__change_type`` and optionally ``partition``/``offset``
    (defaults: 0 / position in the list) and the other technical fields.
    """
    from pyspark.sql import functions as F

    names = [*schema.fields, *(f.name for f in TECHNICAL_FIELDS), "topic", "partition", "offset"]
    data = []
    for i, row in enumerate(rows):
        full = dict(row)
        full.setdefault("__change_time", T0 + full.pop("t", 0))
        full.setdefault("__source_system", "TEST")
        full.setdefault("topic", "orders")
        full.setdefault("partition", 0)
        full.setdefault("offset", i)
        data.append(tuple(full.get(n) for n in names))
    df = spark.createDataFrame(data, _ddl(schema))
    return df.withColumn("__change_time", F.timestamp_micros("__change_time"))


def table_rows(spark: Any, path: str, columns: Iterable[str] = ("ID", "NAME")) -> list[tuple]:
    """The table's rows as sorted tuples of ``columns``."""
    cols = list(columns)
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).select(*cols).collect())


# -- Kafka messages ---------------------------------------------------------------------------


def avro_bytes(schema_json: dict[str, Any], row: Mapping[str, Any]) -> bytes:
    """fastavro's schemaless encoding of ``row``."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, _framing(json.dumps(schema_json))[1], dict(row))
    return buffer.getvalue()


def framed(schema_json: dict[str, Any], row: Mapping[str, Any]) -> bytes:
    """Single-object framed Avro (0xC3 0x01 + fingerprint + body)."""
    return _framing(json.dumps(schema_json))[0] + avro_bytes(schema_json, row)


@functools.lru_cache(maxsize=256)
def _framing(schema_text: str) -> tuple[bytes, Any]:
    """A schema's single-object header and parsed form, once per schema: the fingerprint is
    pure Python (0.55 ms), so per row it made a 30 k-row transaction take 26-40 s to encode."""
    schema_json = json.loads(schema_text)
    return single_object_header(schema_fingerprint(schema_json)), fastavro.parse_schema(schema_json)


def publish_schemas(bootstrap: str, topic: str, schemas_topic: str, schema: ValueSchema) -> None:
    """Write the value and key schema records of ``topic`` to ``schemas_topic`` (WIRE.md)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for kind, js in (("value", schema.to_avro_json()), ("key", KeySchema(schema).to_avro_json())):
        fp = schema_fingerprint(js).hex()
        record = {
            "fingerprint": fp,
            "schema": js,
            "subject": f"{topic}-{kind}",
            "topic": topic,
            "kind": kind,
        }
        producer.produce(schemas_topic, key=fp.encode(), value=json.dumps(record).encode())
    producer.flush(30)


def published_topic(
    new_topic: Any, bootstrap: str, schema: ValueSchema, **topic_args: Any
) -> tuple[str, str]:
    """A fresh data topic and schema topic (the ``new_topic`` fixture), ``schema`` published.

    Returns:
        ``(topic, schemas_topic)``.
    """
    topic, schemas = new_topic(**topic_args), new_topic(suffix="_schemas")
    publish_schemas(bootstrap, topic, schemas, schema)
    return topic, schemas


def encode_row(schema: ValueSchema, row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) framed bytes of a change row given by original names."""
    key_schema = KeySchema(schema)
    value = {f.avro_name: row.get(f.name) for f in schema.fields.values()}
    value.update({f.name: row.get(f.name) for f in TECHNICAL_FIELDS})
    value.setdefault("__source_system", "TEST")
    if value["__source_system"] is None:
        value["__source_system"] = "TEST"
    key = {f.avro_name: row.get(f.name) for f in key_schema.fields}
    return framed(key_schema.to_avro_json(), key), framed(schema.to_avro_json(), value)


def produce_transaction(
    bootstrap: str,
    topic: str,
    schema: ValueSchema,
    rows: Sequence[Mapping[str, Any]],
    commit: bool = True,
    extra: Sequence[tuple[str, bytes | None, bytes | None]] = (),
) -> None:
    """Produce ``rows`` (plus raw ``extra`` (topic, key, value) messages) in one transaction."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"test-{uuid.uuid4().hex}",
            # tens of thousands of rows encoded one by one on a loaded machine can take more
            # than librdkafka's default 60 s, after which the broker fences the transaction
            "transaction.timeout.ms": 300_000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for row in rows:
        key, value = encode_row(schema, row)
        producer.produce(topic, key=key, value=value, partition=row.get("partition", 0))
    for extra_topic, key, value in extra:
        producer.produce(extra_topic, key=key, value=value, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


__all__ = ["AvroInt", "T0"]


# -- micro-batches of Kafka rows, for BatchProcessor -------------------------------------------

KAFKA_ROW_DDL = "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT"


def kafka_rows(spark: Any, messages: Sequence[tuple[str, int, int, bytes | None, bytes | None]]):
    """A DataFrame shaped like the Kafka source's: (topic, partition, offset, key, value)."""
    data = [
        (key, value, topic, partition, offset) for topic, partition, offset, key, value in messages
    ]
    return spark.createDataFrame(data, KAFKA_ROW_DDL)


def row_messages(
    topic: str,
    schema: ValueSchema,
    rows: Sequence[Mapping[str, Any]],
    partition: int = 0,
    first_offset: int = 0,
) -> list[tuple[str, int, int, bytes, bytes]]:
    """Framed change rows as (topic, partition, offset, key, value), offsets counting up."""
    out = []
    for i, row in enumerate(rows):
        key, value = encode_row(schema, row)
        out.append((topic, partition, first_offset + i, key, value))
    return out


def commit_message(
    topic: str,
    offset: int,
    time_us: int,
    ends: Sequence[tuple[str, int, int, int]],
    tables: Sequence[tuple[str, str, int]],
    commit_id: str | None = None,
) -> tuple[str, int, int, bytes, bytes]:
    """A ``_commits`` record (docs/WIRE.md) as a Kafka row on partition 0 of ``topic``.

    Args:
        topic: The commits topic.
        offset: Its offset there.
        time_us: The transaction time.
        ends: ``(topic, partition, min_offset, max_offset)`` of each data partition written.
        tables: ``(topic, table, rows)`` of each table written.
        commit_id: Default: a new UUID.
    """
    commit_id = commit_id or str(uuid.uuid4())
    value = {
        "commit_id": commit_id,
        "producer": "test.tx",
        "source_system": "TEST",
        "function_name": "test_flow",
        "transaction_time": time_us,
        "tables": [{"topic": t, "table": name, "rows": n} for t, name, n in tables],
        "partitions": [
            {"topic": t, "partition": p, "min_offset": lo, "max_offset": hi, "rows": hi - lo + 1}
            for t, p, lo, hi in ends
        ],
    }
    return (topic, 0, offset, commit_id.encode(), json.dumps(value).encode())


def writer_env(lake: str, checkpoint: str, bootstrap: str, **more: str) -> dict[str, str]:
    """``LakehouseSettings`` keyword arguments (its environment names) for a test writer."""
    return {
        "LAKEHOUSE_PATH": lake,
        "LAKEHOUSE_CHECKPOINT_PATH": checkpoint,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        **more,
    }


# -- the writer as a separate process (`python -m lakehouse_writer run ...`) -------------------


class WriterProcess:
    """``lakehouse-writer run`` in its own process group, as an operator would run it.

    Args:
        args: Arguments after ``run``.
        env: Extra environment variables.
        log_path: Where its stdout and stderr go.
        checkpoint: Its checkpoint directory (where the status file is).
    """

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], log_path: Any, checkpoint: str
    ) -> None:
        import os
        import subprocess
        import sys

        self.checkpoint = checkpoint
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lakehouse_writer", "run", *args],
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: kill() takes the JVM child along
        )

    def status(self) -> dict[str, Any] | None:
        """The writer's status file, or None before it is written."""
        from lakehouse_writer.runtime.status import read_status

        return read_status(self.checkpoint)

    def wait_for_batch_after(self, batch_id: int, timeout_s: float) -> int:
        """Wait until a batch later than ``batch_id`` is done; return its id.

        Raises:
            AssertionError: The process ended or the time ran out first (log tail included).
        """
        found = self.wait_for_batch_or_idle(batch_id, timeout_s, idle=False)
        assert found is not None
        return found

    def wait_for_batch_or_idle(
        self, batch_id: int, timeout_s: float, idle: bool = True
    ) -> int | None:
        """:meth:`wait_for_batch_after`, or None once the writer has read everything
        (``idle``: its query reported a later batch id with no lag, and no batch ran).

        Raises:
            AssertionError: The process ended or the time ran out first (log tail included).
        """
        import time

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.status() or {}
            if status.get("last_batch_id", -1) > batch_id:
                return int(status["last_batch_id"])
            lag = status.get("lag") or {}
            if idle and status.get("lag_batch_id", -1) > batch_id and lag and not any(lag.values()):
                return None
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no batch after {batch_id} (rc={self.proc.poll()}):\n{self.tail()}")

    def kill9(self) -> None:
        """SIGKILL the whole process group (Python driver and JVM), as a crash would."""
        import os
        import signal

        os.killpg(self.proc.pid, signal.SIGKILL)
        self.wait(60)

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to end; return its exit code."""
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.close()

    def tail(self, lines: int = 40) -> str:
        """The last lines of its log."""
        from pathlib import Path

        text = Path(self.log_path).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def once_argv(lake: Any, checkpoint: Any, topics: str, bootstrap: str, *more: str) -> list[str]:
    """``lakehouse-writer`` arguments of a drain (``run --once``) of ``topics``, then ``more``."""
    return [
        "run",
        "--lakehouse",
        str(lake),
        "--checkpoint",
        str(checkpoint),
        "--once",
        "--topics",
        topics,
        "--bootstrap-servers",
        bootstrap,
        *more,
    ]
