"""One ORDERS history in four Kafka transactions, and what a test checks of its Delta table.

The crash test (``tests/lakehouse_writer/test_writer_crash.py``) and the killed-worker test
(``tests/cluster/test_worker_killed.py``) drive a writer through the same history:

1. TRUNCATE + REPLACE of ``rows`` rows;
2. UPDATE of every 7th row;
3. DELETE of every 11th row;
4. INSERT of ``new_rows`` new rows.

DuckDB's ``ORDERS`` ends as the state the lakehouse must reach.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb

from producer_lib import (
    KafkaProducer,
    KafkaSettings,
    KeySchema,
    RowType,
    create_key_row,
    create_truncate_row,
)
from producer_lib.kafka.catalog import EmbeddedCatalog
from tests.support.writer import sample_schema

DATA_OPERATIONS = frozenset({"WRITE", "MERGE", "DELETE"})
BATCH_SIZE = 50_000


def orders_source(first: int, count: int) -> str:
    """SQL of ``count`` ORDERS rows from ID ``first`` (columns of :func:`sample_schema`)."""
    return (
        f"select i::BIGINT as ID, 'name ' || i as NAME, ['A', 'B', 'C'][i % 3 + 1] as "
        f"REGION, (i % 1000)::DECIMAL(10, 2) as AMOUNT from range({first}, "
        f"{first + count}) t(i)"
    )


def produce_orders_history(
    bootstrap: str,
    topic: str,
    schemas: str,
    con: duckdb.DuckDBPyConnection,
    rows: int,
    new_rows: int,
    flow: str,
) -> list[str]:
    """The four transactions (module docstring) to ``topic``; their commit ids, in order.

    Args:
        bootstrap: The broker.
        topic: The data topic.
        schemas: The schema catalog topic.
        con: DuckDB, where table ORDERS is created and changed as the rows are sent.
        rows: Rows of the first load.
        new_rows: Rows inserted by the last transaction.
        flow: Prefix of the flow's function name (a fresh suffix is added).
    """
    schema, settings = sample_schema(), KafkaSettings(bootstrap_servers=bootstrap)
    con.execute(f"create table ORDERS as {orders_source(0, rows)}")
    ids = []
    with KafkaProducer(
        "TEST",
        f"{flow}_{uuid.uuid4().hex[:8]}",
        "test",
        "test",
        settings,
        duckdb_connection=con,
        schema_catalog=EmbeddedCatalog(settings, topic=schemas),
    ) as producer:
        target = producer.add_target(topic, "ORDERS", KeySchema(schema), schema)
        truncate = create_truncate_row(schema, None)
        key = create_key_row(truncate, KeySchema(schema))
        producer.produce_row(target, key, truncate, RowType.TRUNCATE, partition=0)
        producer.produce_from_duckdb("ORDERS", target, BATCH_SIZE, RowType.REPLACE)
        ids.append(producer.commit())
        con.execute("update ORDERS set NAME = NAME || ' v2', AMOUNT = AMOUNT + 1 where ID % 7 = 0")
        producer.produce_from_duckdb(
            "select * from ORDERS where ID % 7 = 0", target, BATCH_SIZE, RowType.UPDATE
        )
        ids.append(producer.commit())
        producer.produce_from_duckdb(
            "select * from ORDERS where ID % 11 = 0", target, BATCH_SIZE, RowType.DELETE
        )
        con.execute("delete from ORDERS where ID % 11 = 0")
        ids.append(producer.commit())
        con.execute(f"insert into ORDERS {orders_source(rows, new_rows)}")
        producer.produce_from_duckdb(
            f"select * from ORDERS where ID >= {rows}", target, BATCH_SIZE, RowType.INSERT
        )
        ids.append(producer.commit())
    return ids


def arrow_rows(table: Any) -> list[tuple]:
    """A pyarrow table's rows as sorted tuples."""
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return sorted(zip(*columns, strict=True))


def txn_actions(table: Path) -> tuple[Counter, list[tuple[int, str]]]:
    """(times each (appId, version) was committed, data commits without a txn action)."""
    seen: Counter = Counter()
    unguarded = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        txns = [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a]
        seen.update(txns)
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("operation") in DATA_OPERATIONS and not txns:
            unguarded.append((int(commit.stem), info["operation"]))
    return seen, unguarded
