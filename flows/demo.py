"""``make demo``: the pipeline end to end on this machine, with a readable printout.

Starts the devstack broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` points elsewhere), produces a
committed and an aborted Kafka transaction, streams the topic into a Delta table with Spark
(``read_committed``, ``availableNow``), reads the table back with Spark and with delta-rs, and
exits non-zero unless both readers see exactly the committed rows. Stops what it started.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROWS = 1_000
PARTITIONS = 3


def main() -> int:
    """Run the demo; return the process exit code."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="flow-demo-"))
    try:
        with _broker() as bootstrap:
            topic = _step("create topic", lambda: _create_topic(bootstrap))
            _step(f"produce {ROWS} rows (committed) + 10 rows (aborted)",
                  lambda: _produce(bootstrap, topic))  # fmt: skip
            spark_rows, delta_rs_rows = _step(
                "stream topic -> Delta with Spark", lambda: _to_delta(bootstrap, topic, work)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    expected = {(f"key-{i}", f"row {i}") for i in range(ROWS)}
    ok = spark_rows == delta_rs_rows == expected
    print(f"\n  rows produced (committed)     {len(expected):>7}")
    print(f"  rows in Delta, read by Spark  {len(spark_rows):>7}")
    print(f"  rows in Delta, read by delta-rs {len(delta_rs_rows):>5}")
    print(f"  aborted rows in Delta         {sum(v == 'aborted' for _, v in spark_rows):>7}")
    print(f"\n{'OK' if ok else 'MISMATCH'}: demo finished in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


def _step(title: str, action):  # type: ignore[no-untyped-def]
    print(f"-> {title} ...", flush=True)
    t0 = time.monotonic()
    result = action()
    print(f"   done in {time.monotonic() - t0:.1f}s", flush=True)
    return result


@contextmanager
def _broker() -> Iterator[str]:
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        print(f"-> using Kafka at {configured} (KAFKA_BOOTSTRAP_SERVERS)")
        yield configured
        return
    from devstack import broker

    started_here = broker.status() is None
    layout = _step("start local Kafka broker (devstack)", broker.up)
    try:
        yield layout.bootstrap
    finally:
        if started_here:
            _step("stop local Kafka broker", lambda: broker.down(layout))


def _create_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"demo_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"demo-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(ROWS):
        producer.produce(topic, key=f"key-{i}", value=f"row {i}")
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=f"ghost-{i}", value="aborted")
    producer.flush(30)
    producer.abort_transaction(30)


def _to_delta(bootstrap: str, topic: str, work: Path) -> tuple[set, set]:  # type: ignore[type-arg]
    from deltalake import DeltaTable

    from lakehouse_writer.session import build_spark_session

    spark = build_spark_session(app_name="demo")
    spark.sparkContext.setLogLevel("ERROR")
    table = str(work / "lakehouse" / "demo")
    try:
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            .writeStream.format("delta")
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
            .start(table)
        )
        query.awaitTermination()
        by_spark = {(r.key, r.value) for r in spark.read.format("delta").load(table).collect()}
    finally:
        spark.stop()
    columns = DeltaTable(table).to_pyarrow_table().to_pydict()
    return by_spark, set(zip(columns["key"], columns["value"], strict=True))


if __name__ == "__main__":
    sys.exit(main())
