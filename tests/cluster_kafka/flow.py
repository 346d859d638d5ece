"""The flow of the broker-loss tests: numbered rows of a DuckDB table, in one transaction.

The table has no key, so the writer appends (a row delivered twice would show twice in
Delta). The initial load sends ``rows`` rows in ``chunks`` parts within one transaction and
calls ``between_chunks(producer, chunk)`` after each part (a test kills a node there); each
delta load sends the next ``step`` rows after the pointer.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable

import duckdb

from producer_lib import FunctionRunner, KafkaProducer, KeySchema, RowType, SourceAdapter

BATCH = 5_000  # rows read, encoded and sent at a time
NAMESPACE, TABLE = "TEST", "ROWS"


class RowsFlow(FunctionRunner):
    """``ID``, ``NAME`` and ``V`` of the ids ``0..source_rows-1``; the pointer is the last id."""

    source_system = "TEST"

    def __init__(self, function: str, topic: str, source_rows: int) -> None:
        super().__init__(function)
        self.topic = topic
        self.source = f"SRC_{function}"
        self.rows, self.chunks, self.step = source_rows, 1, 0
        self.between_chunks: Callable[[KafkaProducer, int], None] | None = None
        duckdb.execute(
            f"CREATE OR REPLACE TABLE {self.source} AS SELECT range AS ID, "
            f"'name ' || range AS NAME, (range * 7919) % 100003 AS V FROM range({source_rows})"
        )

    async def _target(self, reader: SourceAdapter, producer: KafkaProducer, low: int, high: int):
        schema = await reader.load(
            TABLE,
            f"SELECT ID, NAME, V FROM {self.source} WHERE ID >= {low} AND ID < {high}",
            NAMESPACE,
            self.source_system,
        )
        return producer.add_target(self.topic, TABLE, KeySchema(schema), schema)

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """Every row of the first ``rows``, in ``chunks`` parts of one transaction."""
        target = await self._target(reader, producer, 0, self.rows)
        size = -(-self.rows // self.chunks)
        for chunk in range(self.chunks):
            part = f"SELECT * FROM {TABLE} WHERE ID >= {chunk * size} AND ID < {(chunk + 1) * size}"
            producer.produce_from_duckdb(part, target, BATCH, RowType.INSERT)
            if self.between_chunks is not None:
                self.between_chunks(producer, chunk)
        self.set_delta_pointer(self.rows - 1)
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """The next ``step`` ids after the pointer."""
        last = int(self.get_delta_pointer())
        target = await self._target(reader, producer, last + 1, last + 1 + self.step)
        producer.produce_from_duckdb(TABLE, target, BATCH, RowType.INSERT)
        self.set_delta_pointer(last + self.step)
        producer.commit()

    def source_hashes(self, upto: int) -> Counter:
        """The row hashes of ids ``0..upto-1`` of the source."""
        rows = duckdb.execute(f"SELECT ID, NAME, V FROM {self.source} WHERE ID < {upto}").fetchall()
        return row_hashes(rows)


def row_hash(row: Iterable[object]) -> str:
    """A row's hash over its values (``ID|NAME|V``)."""
    return hashlib.sha1("|".join(map(str, row)).encode()).hexdigest()  # noqa: S324 - not secret


def row_hashes(rows: Iterable[Iterable[object]]) -> Counter:
    """How often each row hash occurs."""
    return Counter(row_hash(r) for r in rows)
