"""Benchmark: the key check of ``produce_from_duckdb`` against the export it guards.

Run: ``.venv/bin/python bench/key_check.py [--rows N] [--rounds R]``

One process, one in-memory DuckDB table of N order lines (a BIGINT key, a compound key of two
columns, ints, a decimal, a date and two strings), one topic of three partitions. Each round
measures, side by side:

- ``export``: ``produce_from_duckdb(check_keys=False)`` + ``commit``: read, encode, send;
- ``export_checked``: the same with the key check (the default for a keyed table);
- ``check``: ``check_keys`` alone on the single-column key (one scan: count, null count,
  count distinct);
- ``check_compound``: the same on the two-column key;
- ``group_by``: the formulation the check replaced (null count and sample, then
  ``GROUP BY ... HAVING count(*) > 1`` counted and sampled: four queries).

The best of the rounds counts (the machine is shared). ``check_ratio`` is check / export,
the figure issue 24 bounds at 10 %. The broker is ``KAFKA_BOOTSTRAP_SERVERS``, else the
devstack broker. Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import duckdb
from confluent_kafka.admin import AdminClient, NewTopic

from devstack import broker
from producer_lib.kafka import KafkaProducer, Target
from producer_lib.schema import (
    AvroDate,
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    KeySchema,
    RowType,
    ValueSchema,
)
from producer_lib.settings import KafkaSettings
from producer_lib.staging.pk_check import _duplicate_keys, _null_keys, check_keys

BATCH_SIZE = 40_000  # the batch size the flows use
log = logging.getLogger("bench.key_check")


def _table(con: duckdb.DuckDBPyConnection, rows: int) -> ValueSchema:
    con.execute("SET threads = 2")  # the machine's cores; the export uses the same
    con.sql(f"""CREATE TABLE LINES AS SELECT range::BIGINT AS ID, (range // 4)::BIGINT AS ORDER_ID,
                (range % 4)::INT AS LINE_NO, (range % 997)::INT AS PART_ID,
                (range % 50 + 1)::INT AS QUANTITY, (range % 100000 / 100)::DECIMAL(12, 2) AS PRICE,
                DATE '2024-01-01' + (range % 365)::INT AS SHIP_DATE,
                'part ' || (range % 997) || ' of order ' || (range // 4) AS NAME,
                CASE range % 3 WHEN 0 THEN 'AIR' WHEN 1 THEN 'RAIL' ELSE 'SHIP' END AS MODE
                FROM range({rows})""")
    schema = ValueSchema("LINES", "BENCH")
    for name, avro in (
        ("ID", AvroLong()),
        ("ORDER_ID", AvroLong()),
        ("LINE_NO", AvroInt()),
        ("PART_ID", AvroInt()),
        ("QUANTITY", AvroInt()),
        ("PRICE", AvroDecimal(12, 2)),
        ("SHIP_DATE", AvroDate()),
        ("NAME", AvroNVarchar(80)),
        ("MODE", AvroNVarchar(10)),
    ):
        schema.add_field(name, avro, nullable=name != "ID")
    schema.add_primary_key("ID")
    return schema


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _export(producer: KafkaProducer, target: Target, checked: bool) -> None:
    rows = producer.produce_from_duckdb(
        "LINES", target, BATCH_SIZE, RowType.REPLACE, check_keys=checked
    )
    assert rows > 0
    producer.commit()


def _group_by(con: duckdb.DuckDBPyConnection, keys: list[str]) -> None:
    _null_keys(con, '"LINES"', keys)
    _duplicate_keys(con, '"LINES"', keys)


def _round(producer: KafkaProducer, target: Target, con: duckdb.DuckDBPyConnection) -> dict:
    return {
        "export_s": _timed(lambda: _export(producer, target, checked=False)),
        "export_checked_s": _timed(lambda: _export(producer, target, checked=True)),
        "check_s": _timed(lambda: check_keys("LINES", ["ID"], con)),
        "check_compound_s": _timed(lambda: check_keys("LINES", ["ORDER_ID", "LINE_NO"], con)),
        "group_by_s": _timed(lambda: _group_by(con, ["ID"])),
    }


def run(bootstrap: str, rows: int, rounds: int) -> dict[str, Any]:
    """Measure ``rounds`` rounds on ``rows`` rows; return the best time of each phase."""
    con = duckdb.connect()
    schema = _table(con, rows)
    topic = f"bench_key_check_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    try:
        with KafkaProducer(
            "BENCH", "bench_key_check", "bronze", "bench", settings, log, duckdb_connection=con
        ) as producer:
            target = producer.add_target(topic, "LINES", KeySchema(schema), schema)
            _export(producer, target, checked=False)  # warm-up: connections, metadata
            results = [_round(producer, target, con) for _ in range(rounds)]
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)
    best = {key: round(min(r[key] for r in results), 3) for key in results[0]}
    return {
        "rows": rows,
        "rounds": rounds,
        **best,
        "check_ratio": round(best["check_s"] / best["export_s"], 4),
        "check_compound_ratio": round(best["check_compound_s"] / best["export_s"], 4),
        "checked_export_ratio": round(best["export_checked_s"] / best["export_s"], 4),
        "group_by_over_check": round(best["group_by_s"] / best["check_s"], 2),
    }


def main() -> None:
    """Parse arguments, run, print the result as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker.bootstrap_servers() as bootstrap:
        result = run(bootstrap, args.rows, args.rounds)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
