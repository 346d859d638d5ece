"""Benchmark: what a table's expectations cost the export they guard.

Run: ``.venv/bin/python bench/expectations.py [--rows N] [--rounds R]``

One process, one in-memory DuckDB table of N order lines (the table of ``bench/key_check.py``),
three topics of three partitions, one value schema each:

- ``export``: no expectation: ``produce_from_duckdb`` + ``commit`` (read, encode, send);
- ``export_expect``: three expectations every row meets (a row predicate ``"PRICE" >= 0``
  warn, ``MODE`` in a set fail, ``QUANTITY`` between 1 and 50 drop): the check is one
  extra scan, the export reads the table as before;
- ``export_dropping``: the same with ``QUANTITY`` between 1 and 49: 2 % of the rows fail the
  drop expectation and go to ``_rejected_rows``; the export reads through the filter;
- ``check``: the check query alone (``check_expectations``).

The best of the rounds counts (the machine is shared). ``expect_ratio`` is export_expect /
export - 1: the cost of expectations every row meets, the figure the issue bounds at 10 %.
The broker is ``KAFKA_BOOTSTRAP_SERVERS``, else the devstack broker. Last line:
``RESULT {json}``.
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

from bench.key_check import BATCH_SIZE, _table
from devstack import broker
from producer_lib.kafka import KafkaProducer, Target
from producer_lib.schema import KeySchema, RowType, ValueSchema
from producer_lib.settings import KafkaSettings
from producer_lib.staging.expectations import check_expectations

log = logging.getLogger("bench.expectations")


def _expecting(schema: ValueSchema, quantity_high: int) -> ValueSchema:
    """``schema`` with the three expectations (``quantity_high`` 50: every row meets them)."""
    copy = ValueSchema.from_avro_json(schema.to_avro_json())
    copy.expect('"PRICE" >= 0', name="price_positive", action="warn")
    copy.expect_column("MODE", in_set=["AIR", "RAIL", "SHIP"], name="mode_known")
    copy.expect_column("QUANTITY", between=(1, quantity_high), action="drop", name="quantity")
    return copy


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _export(producer: KafkaProducer, target: Target) -> None:
    producer.produce_from_duckdb("LINES", target, BATCH_SIZE, RowType.REPLACE, check_keys=False)
    producer.commit()


def _round(
    producer: KafkaProducer, targets: dict[str, Target], con: duckdb.DuckDBPyConnection
) -> dict[str, float]:
    rules = targets["expect"].value_schema.expectations
    return {
        "export_s": _timed(lambda: _export(producer, targets["plain"])),
        "export_expect_s": _timed(lambda: _export(producer, targets["expect"])),
        "export_dropping_s": _timed(lambda: _export(producer, targets["dropping"])),
        "check_s": _timed(
            lambda: check_expectations(con, "LINES", rules, table="BENCH.LINES", flow="bench")
        ),
    }


def run(bootstrap: str, rows: int, rounds: int) -> dict[str, Any]:
    """Measure ``rounds`` rounds on ``rows`` rows; return the best time of each phase."""
    con = duckdb.connect()
    schema = _table(con, rows)
    schemas = {
        "plain": schema,
        "expect": _expecting(schema, 50),
        "dropping": _expecting(schema, 49),
    }
    topics = {kind: f"bench_expect_{kind}_{uuid.uuid4().hex[:8]}" for kind in schemas}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in topics.values()]).values():
        future.result(timeout=30)
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    try:
        with KafkaProducer(
            "BENCH", "bench_expectations", "bronze", "bench", settings, log, duckdb_connection=con
        ) as producer:
            targets = {
                kind: producer.add_target(topics[kind], "LINES", KeySchema(s), s)
                for kind, s in schemas.items()
            }
            _export(producer, targets["plain"])  # warm-up: connections, metadata
            results = [_round(producer, targets, con) for _ in range(rounds)]
            dropped = producer.take_expectation_reports()[-1].counts[2].failed
    finally:
        for future in admin.delete_topics(list(topics.values())).values():
            future.result(timeout=30)
    best = {key: round(min(r[key] for r in results), 3) for key in results[0]}
    return {
        "rows": rows,
        "rounds": rounds,
        "expectations": 3,
        "dropped_rows": dropped,
        **best,
        "expect_ratio": round(best["export_expect_s"] / best["export_s"] - 1, 4),
        "dropping_ratio": round(best["export_dropping_s"] / best["export_s"] - 1, 4),
        "check_ratio": round(best["check_s"] / best["export_s"], 4),
    }


def main() -> None:
    """Parse arguments, run, print the result as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the dropping export warns once per round
    with broker.bootstrap_servers() as bootstrap:
        result = run(bootstrap, args.rows, args.rounds)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
