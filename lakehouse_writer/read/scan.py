"""One pass over a micro-batch: read from Kafka, decode the expected schemas, cache, count.

Every later step of a batch reads its rows again (truncates, uniqueness, the MERGE or append,
rejected rows), so the batch is cached once. Caching the raw bytes and decoding them in a
second pass costs about as much again as the read (a pass over the bytes and a second
cache); instead the writer *expects* the writer schemas of the batch — those of the last
batches, and on a cold start the latest value schema of each subscribed topic in the
catalog — and decodes them while it reads, with one ``from_avro`` per expected schema:

- a row whose header is expected and whose body decodes is cached as its decoded struct
  (``__r<i>``) only; its raw bytes are left out (they are fetched again from the batch for
  the rare row rejected later, :func:`~lakehouse_writer.read.decode.with_raw_bytes`);
- every other row (system topics, no header, a schema not expected, bytes that do not
  decode) keeps its ``key`` and ``value``; :mod:`lakehouse_writer.read.decode` decodes those whose
  schema the catalog knows from the cache, as before.

One aggregate over the cache then gives the highest offset of every topic partition, the
headers per topic, and per expected schema the counts per change type, the decode failures,
the first key column's range and the oldest change time
(:class:`~lakehouse_writer.read.summary.RowSummary`). A wrong guess costs speed, never correctness.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse_writer.read.catalog import CatalogEntry
from lakehouse_writer.read.decode import Decoded
from lakehouse_writer.read.framing import HEADER, avro_struct, body_column, header_column
from lakehouse_writer.read.keys import KeySchemaRef, candidates, with_key_check
from lakehouse_writer.read.summary import RowSummary, summary_aggregates
from lakehouse_writer.runtime.lines import dataframe_from_arrow, to_arrow
from producer_lib.errors import SchemaError
from producer_lib.schema import ValueSchema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

MAX_EXPECTED = 16  # writer schemas decoded in the first pass; the rest are decoded after


@dataclass(frozen=True)
class Expected:
    """A writer schema the batch is expected to hold.

    Attributes:
        header: The header bytes of its rows (``0x00`` + id, or ``0xC3 0x01`` + fingerprint).
        entry: The catalog entry.
        schema: Its value schema.
        known_keys: Key writer schemas its rows' keys are expected to have, besides the one
            this project's producer writes (:func:`~lakehouse_writer.read.keys.own_key`).
    """

    header: bytes
    entry: CatalogEntry
    schema: ValueSchema
    known_keys: tuple[KeySchemaRef, ...] = ()

    @property
    def keys(self) -> tuple[KeySchemaRef, ...]:
        """The key writer schemas the scan decodes and checks its rows' keys with."""
        return candidates(self.schema, self.known_keys)


@dataclass
class BatchScan:
    """The batch as read, and what it holds.

    Attributes:
        cached: The cached rows: ``topic``, ``partition``, ``offset``, ``HEADER``, ``key`` and
            ``value`` (null where the row decoded) and one ``__r<i>`` per expected schema.
            For a batch read into the driver (:func:`collect`): None until a step asks for
            its rows in Spark (:attr:`frame`, :meth:`of_topics`).
        raw: A batch read into the driver: its rows as Arrow (the columns of ``cached``
            without the ``__r<i>``); None for a batch scanned by Spark.
        system: The topics whose rows are not change rows.
        spark: The batch's session (makes the Spark rows of ``raw``).
        offsets: Highest offset per (topic, partition).
        headers: Headers seen per topic (None: rows without one).
        rows: Rows per header of the data topics (None: rows without one).
        decoded: Per header decoded here, its rows (:class:`Decoded`).
    """

    cached: DataFrame | None = None
    raw: pa.Table | None = None
    system: frozenset[str] = frozenset()
    spark: SparkSession | None = None
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    headers: dict[str, set[bytes | None]] = field(default_factory=dict)
    rows: dict[bytes | None, int] = field(default_factory=dict)
    decoded: dict[bytes, Decoded] = field(default_factory=dict)
    _made: list[DataFrame] = field(default_factory=list)

    def topics_of(self, header: bytes) -> set[str]:
        """The topics whose rows carry ``header``."""
        return {topic for topic, seen in self.headers.items() if header in seen}

    def __len__(self) -> int:
        """The rows of a batch read into the driver (0 for one scanned by Spark)."""
        return 0 if self.raw is None else self.raw.num_rows

    @property
    def frame(self) -> DataFrame:
        """The batch's rows in Spark, cached (made from :attr:`raw` on first use)."""
        if self.cached is None:
            self.cached = self._spark_rows(self.raw)
        return self.cached

    def of_topics(self, topics: Collection[str]) -> DataFrame:
        """The rows of ``topics`` in Spark (of a batch in the driver: only those rows)."""
        from pyspark.sql import functions as F

        if self.cached is not None or self.raw is None:
            return self.frame.filter(F.col("topic").isin(*topics))
        return self._spark_rows(_where(self.raw, "topic", topics))

    def messages(self, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
        """``(partition, offset, key, value)`` of every row of ``topic``, in batch order."""
        if self.raw is not None:
            found = _where(self.raw, "topic", [topic])
        else:
            found = to_arrow(self.of_topics([topic]).select("partition", "offset", "key", "value"))
        columns = [found.column(c).to_pylist() for c in ("partition", "offset", "key", "value")]
        return list(zip(*columns, strict=True))

    def rows_of(self, headers: Collection[bytes]) -> pa.Table:
        """The data rows with one of ``headers``, each header's rows together, in batch order.

        Columns ``topic``, ``partition``, ``offset``, ``key``, ``value`` and ``HEADER``; one
        Spark job for a batch scanned by Spark, none for a batch in the driver.
        """
        from pyspark.sql import functions as F

        columns = ["topic", "partition", "offset", "key", "value", HEADER]
        if self.raw is not None:
            data = _where(self.raw, "topic", self.system, keep=False)
            found = _where(data, HEADER, headers).select(columns)
        else:
            data = (
                self.frame.filter(~F.col("topic").isin(*self.system)) if self.system else self.frame
            )
            found = to_arrow(data.filter(F.col(HEADER).isin(*headers)).select(*columns))
        if len(headers) < 2:
            return found
        return found.sort_by(HEADER)  # a stable sort: each header's rows together

    def release(self) -> None:
        """Drop what was cached for the batch."""
        if self.cached is not None:
            self.cached.unpersist()
        for frame in self._made:
            frame.unpersist()
        self._made.clear()

    def _spark_rows(self, rows: pa.Table | None) -> DataFrame:
        assert rows is not None and self.spark is not None, "a batch scanned by Spark has one"
        frame = dataframe_from_arrow(self.spark, rows).persist()
        self._made.append(frame)
        return frame


def _where(table: pa.Table, column: str, values: Collection[Any], keep: bool = True) -> pa.Table:
    """The rows of ``table`` whose ``column`` is one of ``values`` (or none, ``keep=False``)."""
    import pyarrow.compute as pc

    mask = pc.is_in(
        table.column(column), value_set=pa.array(list(values), table.schema.field(column).type)
    )
    if not keep:
        mask = pc.invert(mask)
    if pc.all(mask).as_py() is not False:  # every row (or none): no copy
        return table
    return table.filter(mask)


def collect(df: DataFrame, system_topics: Iterable[str], raw: pa.Table | None = None) -> BatchScan:
    """Read a small batch into the driver (one Spark job, or ``raw``): no cache, no decode.

    For a batch the driver applies whole (:mod:`lakehouse_writer.route.driver_tables`):
    the scan's job and cache, then a second job to collect the small tables' rows, cost more than
    the rows (``docs/PERFORMANCE.md``). What :func:`scan` finds by an aggregate is counted here
    from the rows; a step that needs rows in Spark after all (a table left to Spark's path,
    the logs) gets them from :meth:`BatchScan.of_topics`.

    Args:
        df: The batch's rows in Spark (the Kafka source's, maybe with held rows and cut).
        system_topics: Topics whose rows are not change rows.
        raw: The same rows read already (:class:`~lakehouse_writer.read.driver_read.DriverRead`);
            None: read by one Spark job.
    """
    system = frozenset(system_topics)
    if raw is None:
        raw = to_arrow(
            few_partitions(df).select(
                "topic", "partition", "offset", header_column().alias(HEADER), "key", "value"
            )
        )
    found = BatchScan(raw=raw, system=system, spark=df.sparkSession)
    highest = raw.group_by(["topic", "partition"]).aggregate([("offset", "max")])
    for topic, partition, offset in zip(
        *(highest.column(c).to_pylist() for c in ("topic", "partition", "offset_max")),
        strict=True,
    ):
        found.offsets[(topic, int(partition))] = int(offset)
    counted = raw.group_by(["topic", HEADER]).aggregate([("offset", "count")])
    for topic, head, n in zip(
        *(counted.column(c).to_pylist() for c in ("topic", HEADER, "offset_count")), strict=True
    ):
        found.headers.setdefault(topic, set()).add(head)
        if topic not in system:
            found.rows[head] = found.rows.get(head, 0) + int(n)
    return found


def scan(df: DataFrame, expected: list[Expected], system_topics: Iterable[str]) -> BatchScan:
    """Read, decode and cache the batch in one pass, then aggregate it once (see above).

    Args:
        df: The Kafka source's batch.
        expected: The writer schemas to decode in this pass.
        system_topics: Topics whose rows are not change rows (kept as bytes).
    """
    from pyspark.sql import functions as F

    header = F.col(HEADER)
    system = set(system_topics)
    data = ~F.col("topic").isin(*system) if system else F.lit(True)
    read = few_partitions(df).select(
        "key", "value", "topic", "partition", "offset", header_column().alias(HEADER)
    )
    structs = [
        F.when(data & (header == F.lit(e.header)), _from_avro(e)).alias(f"__r{i}")
        for i, e in enumerate(expected)
    ]
    decoded = read.select("key", "value", "topic", "partition", "offset", HEADER, *structs)
    for i, e in enumerate(expected):  # a key that disagrees: not decoded here (see read.py)
        decoded = with_key_check(decoded, f"__r{i}", e.schema, e.keys)
    change = _change_type(len(expected))
    ok = change.isNotNull()
    frame = decoded.select(
        "topic",
        "partition",
        "offset",
        HEADER,
        F.when(~ok, F.col("key")).alias("key"),
        F.when(~ok, F.col("value")).alias("value"),
        *[f"__r{i}" for i in range(len(expected))],
    )
    frame = frame.persist()
    found = BatchScan(frame, system=frozenset(system))
    try:
        groups = _aggregate(frame, expected)
    except BaseException:
        frame.unpersist()
        raise
    for g in groups:
        key = (g["topic"], int(g["partition"]))
        found.offsets[key] = max(int(g["o"]), found.offsets.get(key, -1))
        head = None if g[HEADER] is None else bytes(g[HEADER])
        found.headers.setdefault(g["topic"], set()).add(head)
        if g["topic"] not in system:
            found.rows[head] = found.rows.get(head, 0) + int(g["n"])
    for i, e in enumerate(expected):
        mine = [
            g
            for g in groups
            if g[HEADER] is not None and bytes(g[HEADER]) == e.header and g["topic"] not in system
        ]
        if not mine:
            continue
        parsed = frame.filter(header == F.lit(e.header)).select(
            "topic", "partition", "offset", "key", "value", F.col(f"__r{i}").alias("__r")
        )
        rows = [
            (
                g["change"],
                g["n"],
                g[f"valued{i}"],
                g[f"lo{i}"],
                g[f"hi{i}"],
                g[f"old{i}"],
                g[f"truncates{i}"],
            )
            for g in mine
        ]
        failures = sum(n for change, n, *_ in rows if change is None)
        summary = RowSummary.of_counts(r for r in rows if r[0] is not None)
        found.decoded[e.header] = Decoded(parsed, summary, failures, by_scan=True)
    return found


def few_partitions(frame: DataFrame) -> DataFrame:
    """``frame`` in at most as many partitions as Spark has cores (merged, no shuffle).

    The Kafka source gives one partition per topic partition, and every job over the
    cached batch runs a task per partition of it: a batch over 100 single-partition topics
    ran 100 tasks in each of a table's jobs — most of what a small table cost. With the
    partitions merged, a job over one table's rows runs a task per core, whose cached
    column batches of other tables are skipped by their statistics.

    Merged before the decoding projection, not after: outside whole-stage code generation
    (too many fields) Spark builds the projection again for every partition it reads, and
    each ``from_avro`` in it parses a new Hadoop configuration. Over 100 partitions with 16
    expected schemas that was 29 of the 35 s the scan of a 1,200-row batch took.
    """
    return frame.coalesce(frame.sparkSession.sparkContext.defaultParallelism)


def _from_avro(e: Expected) -> Column:
    return avro_struct(body_column(len(e.header)), e.entry.schema_json)


def _change_type(count: int) -> Column:
    """The change type of a row decoded by one of the ``count`` structs; null if none."""
    from pyspark.sql import functions as F

    types = [F.col(f"__r{i}.__change_type") for i in range(count)]
    if not types:
        return F.lit(None).cast("string")
    return types[0] if count == 1 else F.coalesce(*types)


def _aggregate(frame: DataFrame, expected: list[Expected]) -> list[Any]:
    """Per (topic, partition, header, change type): highest offset, rows, key range, oldest."""
    from pyspark.sql import functions as F

    aggregates = [F.max("offset").alias("o")]
    for i, e in enumerate(expected):
        first = e.schema.fields.get(e.schema.pks[0]) if e.schema.pks else None
        key = F.col(f"__r{i}.`{first.avro_name}`") if first is not None else None
        row = F.col(f"__r{i}")
        n, valued, lo, hi, old, truncates = summary_aggregates(
            key, row["__change_time"], row["__change_type"], row["__truncate"]
        )
        if i == 0:
            aggregates.append(n)
        aggregates += [
            valued.alias(f"valued{i}"),
            lo.alias(f"lo{i}"),
            hi.alias(f"hi{i}"),
            old.alias(f"old{i}"),
            truncates.alias(f"truncates{i}"),
        ]
    if not expected:
        aggregates.append(F.count(F.lit(1)).alias("n"))
    by: list[Column | str] = ["topic", "partition", HEADER]
    by.append(_change_type(len(expected)).alias("change"))
    return frame.groupBy(*by).agg(*aggregates).collect()


class ExpectedSchemas:
    """The writer schemas the next batch is expected to hold (most recently seen first).

    Args:
        limit: At most this many are decoded in the first pass.
    """

    def __init__(self, limit: int = MAX_EXPECTED) -> None:
        self._limit = limit
        self._seen: OrderedDict[bytes, Expected] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._seen)

    def guess(self) -> list[Expected]:
        """The schemas to decode in the next first pass."""
        return list(self._seen.values())[: self._limit]

    def saw(self, header: bytes, entry: CatalogEntry, keys: Iterable[KeySchemaRef] = ()) -> None:
        """A batch held rows of this writer schema (it becomes the most recent).

        ``keys``: the key writer schemas its rows' keys may have besides the producer's own
        (:attr:`~lakehouse_writer.read.decode.DecodedBatch.keys`): the scan then checks those keys
        too, instead of leaving their rows to the decode after it.
        """
        known = tuple(keys)
        seen = self._seen.get(header)
        if seen is not None and (not known or seen.known_keys == known):
            self._seen.move_to_end(header, last=False)
            return
        try:
            schema = ValueSchema.from_avro_json(entry.schema_json)
        except SchemaError:
            return  # not a value schema: its rows are rejected by the decode
        self._seen[header] = Expected(header, entry, schema, known)
        self._seen.move_to_end(header, last=False)
        while len(self._seen) > self._limit:
            self._seen.popitem()

    def seed(self, candidates: Iterable[tuple[bytes, CatalogEntry]]) -> None:
        """On a cold start: schemas the catalog holds (the first ones win when over limit)."""
        for header, entry in reversed(list(candidates)[: self._limit]):
            self.saw(header, entry)
