"""An export and another run's reader on one DuckDB connection take turns.

Two runs of a flow in one process (a detached run and the request that takes over from it)
share DuckDB's default connection: one run exports on the event loop while the other's reader
works in :meth:`SourceAdapter.run_locked`'s worker thread. The export reads the connection
batch by batch; a statement of the other thread between two batches ends the export's stream
or takes its result, and the two threads once deadlocked inside DuckDB (GIL against the
connection's context lock).
"""

from __future__ import annotations

import asyncio
import threading

import duckdb
import pytest

from producer_lib.schema import KeySchema, RowType
from producer_lib.sources import SourceAdapter
from tests.support.consume import consume_all
from tests.support.producers import notes_schema, shop_producer

ROWS = 60_000


@pytest.mark.kafka
def test_an_export_and_a_readers_worker_thread_on_one_connection_both_finish(
    kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=2)
    con = duckdb.connect()
    con.sql(
        f"create table NOTES as select range::bigint as ID, 'n' || range as TEXT from range({ROWS})"
    )
    other_run = SourceAdapter(connection=con)

    def many_queries() -> int:
        return sum(con.execute(f"select {i}").fetchone()[0] for i in range(3000))

    async def both() -> tuple[int, int]:
        with shop_producer(kafka_bootstrap, con) as producer:
            target = producer.add_target(topic, "NOTES", KeySchema(notes_schema()), notes_schema())
            work = asyncio.ensure_future(other_run.run_locked(many_queries))
            await asyncio.sleep(0)  # the worker thread starts its queries
            rows = producer.produce_from_duckdb("NOTES", target, 500, RowType.REPLACE)
            producer.commit()
            return rows, await work

    result: list[tuple[int, int]] = []
    runner = threading.Thread(target=lambda: result.append(asyncio.run(both())), daemon=True)
    runner.start()  # a deadlock must fail the test, not hang pytest
    runner.join(180)
    assert result == [(ROWS, sum(range(3000)))], "the export and the reader interleaved"
    messages = consume_all(kafka_bootstrap, topic)
    assert len(messages) == len({m.key() for m in messages}) == ROWS
