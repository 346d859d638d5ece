"""Readers staging in one DuckDB connection take turns, whatever thread or run calls them.

Two runs of a flow in one process (a detached run and the request that takes over from it)
each have a reader on DuckDB's default connection. One run's ``prepare_load`` on the event
loop and the other's ``run_locked`` work in a worker thread once deadlocked inside DuckDB
(``make test``, ``test_detached_runs``), or one took the other's query result: a lock per
reader did not keep them apart.
"""

from __future__ import annotations

import asyncio
import threading

import duckdb

from producer_lib.schema import AvroLong, ValueSchema
from producer_lib.sources import SourceAdapter


def _schema() -> ValueSchema:
    schema = ValueSchema("T", "TEST")
    schema.add_field("ID", AvroLong(), nullable=False)
    return schema


def test_readers_of_one_connection_share_its_lock_and_others_do_not():
    con, other = duckdb.connect(), duckdb.connect()
    first, second = SourceAdapter(connection=con), SourceAdapter(connection=con)
    assert first._lock is second._lock
    assert SourceAdapter(connection=other)._lock is not first._lock


def test_two_runs_on_one_connection_from_loop_and_worker_thread_finish():
    """One reader's worker thread runs queries while another stages tables on the loop."""
    con = duckdb.connect()
    mover, stager = SourceAdapter(connection=con), SourceAdapter(connection=con)

    def many_queries() -> int:
        return sum(con.execute(f"select {i}").fetchone()[0] for i in range(3000))

    async def both() -> int:
        work = asyncio.ensure_future(mover.run_locked(many_queries))
        await asyncio.sleep(0)  # the worker starts
        for i in range(300):
            stager.prepare_load(f"STAGE_{i % 3}", _schema())
        return await work

    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(asyncio.run(both())), daemon=True)
    runner.start()  # a deadlock must fail the test, not hang pytest
    runner.join(120)
    # Without one lock per connection this failed at once: a query's result was taken by the
    # other thread's statement (fetchone() gave None), when it did not deadlock.
    assert result == [sum(range(3000))], "the readers' calls interleaved, or deadlocked"
