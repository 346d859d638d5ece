"""A small flow for the runner tests, configured by environment variables so that the same
class runs in-process, through ``producer-lib run`` and in a subprocess.

- ``RUNNER_TEST_FUNCTION``: function name; ``RUNNER_TEST_TOPIC``: data topic.
- ``RUNNER_TEST_FAIL``: ``after_produce`` raises after producing, before commit;
  ``kill`` SIGKILLs the process there; ``no_commit`` returns without committing;
  ``pointer_only`` stages a pointer and commits no data.
- ``RUNNER_TEST_GATE``: a path; the delta load waits until that file exists (for races).
- ``before_produce`` (attribute, in-process only): called by the delta load once it has its
  target, before it produces (a test stops the broker there).

The source is a DuckDB table ``SRC_<function>`` of ids 0..999 with names; the initial load
publishes ids < 10 (TRUNCATE + REPLACE), each delta load the next 5 ids after the pointer.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import duckdb

from producer_lib import (
    FunctionRunner,
    KafkaProducer,
    KeySchema,
    RowType,
    SourceAdapter,
    create_key_row,
    create_truncate_row,
)


class NumbersFlow(FunctionRunner):
    """Ids and names from a DuckDB table, with the delta pointer as the last id published."""

    source_system = "TEST"

    def __init__(self) -> None:
        super().__init__(os.environ["RUNNER_TEST_FUNCTION"])
        self.topic = os.environ["RUNNER_TEST_TOPIC"]
        self.source = f"SRC_{self.function_name}"
        self.before_produce: Callable[[], None] | None = None
        duckdb.execute(
            f"CREATE TABLE IF NOT EXISTS {self.source} AS SELECT range AS ID, "
            f"'name ' || range AS NAME FROM range(1000)"
        )

    async def _load(self, reader: SourceAdapter, producer: KafkaProducer, low: int, high: int):
        schema = await reader.load(
            "NUMBERS",
            f"SELECT ID, NAME FROM {self.source} WHERE ID >= {low} AND ID < {high}",
            "TEST",
            "TEST",
        )
        schema.set_primary_keys("ID")
        return producer.add_target(self.topic, "NUMBERS", KeySchema(schema), schema)

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        target = await self._load(reader, producer, 0, 10)
        truncate = create_truncate_row(target.value_schema, None)
        producer.produce_row(
            target,
            create_key_row(truncate, target.key_schema),
            truncate,
            RowType.TRUNCATE,
            partition=0,
        )
        producer.produce_from_duckdb("NUMBERS", target, 1000, RowType.REPLACE)
        self.set_delta_pointer(9)
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        gate = os.environ.get("RUNNER_TEST_GATE")
        while gate and not Path(gate).exists():
            await asyncio.sleep(0.05)
        last = self.get_delta_pointer()
        fail = os.environ.get("RUNNER_TEST_FAIL", "")
        if fail == "pointer_only":
            self.set_delta_pointer(last + 100)
            return
        target = await self._load(reader, producer, last + 1, last + 6)
        if self.before_produce is not None:
            self.before_produce()
        producer.produce_from_duckdb("NUMBERS", target, 1000, RowType.INSERT)
        self.set_delta_pointer(last + 5)
        if fail == "after_produce":
            raise RuntimeError("source went away")
        if fail == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fail != "no_commit":
            producer.commit()


class RecordingFlow(FunctionRunner):
    """Produces nothing; records every load it starts, for tests of who may start one.

    - ``GUARD_TEST_FUNCTION``: function name; ``GUARD_TEST_RECORD``: a file that gets one line
      ``<load> <dataflow> <run id>`` per load started.
    - ``GUARD_TEST_GATE``: a path; loads of a dataflow whose name starts with ``gated`` wait
      until that file exists.
    """

    source_system = "TEST"

    def __init__(self) -> None:
        super().__init__(os.environ["GUARD_TEST_FUNCTION"])

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        await self._load("initial")

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        await self._load("delta")

    async def _load(self, load: str) -> None:
        with open(os.environ["GUARD_TEST_RECORD"], "a") as record:
            record.write(f"{load} {self.dataflow} {self.run_id}\n")
        gate = os.environ.get("GUARD_TEST_GATE", "")
        while self.dataflow.startswith("gated") and gate and not Path(gate).exists():
            await asyncio.sleep(0.05)
