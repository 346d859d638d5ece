"""The small tables of a batch, applied in the driver: decoded in Python, merged by delta-rs.

A source system's delta load touches hundreds of tables with a few rows each. Through Spark,
each of them costs a decode job, a summary job and some twenty analyzed DataFrame operations
before delta-rs merges its few rows: the plans, not the rows, were the batch's time
(``docs/PERFORMANCE.md``). :class:`SmallTables` takes such tables off Spark's path:

1. A batch of at most ``read_rows`` messages whose topics each have at most ``max_rows`` is
   read into the driver whole by a Kafka consumer (:meth:`SmallTables.takes_batch`,
   :class:`~lakehouse_writer.read.driver_read.DriverRead`,
   :func:`~lakehouse_writer.read.scan.collect`; one Spark job should that consumer give up). In
   another batch the scan does not decode the topics with at most ``max_rows`` messages
   (:meth:`SmallTables.scanned`): their rows stay raw bytes in the cached batch, and one Spark job
   collects the raw rows of the small tables (:meth:`SmallTables.apply`), or one per run of tables
   of ``max_rows`` rows
   together: what the driver holds at once.
2. Per table, the values and the keys are decoded, and every key must agree with its value
   (:mod:`lakehouse_writer.read.keys`): by DuckDB into columns from :data:`COLUMNS_FROM_ROWS` rows
   (:mod:`lakehouse_writer.read.avro_arrow`), by fastavro a row at a time below that. Either way
   the rows become Arrow columns: the payload, and the few columns the rules read.
3. The row rules of :mod:`lakehouse_writer.engines.spark.apply`, for the shapes taken here, by Arrow
   compute over those columns: upserts and deletes (I, U, A, R, D, X) and BEFORE images (B:
   the delete of the old key when their UPDATE moved it), the last row per key by (change
   time, partition, offset), rows covered by earlier TRUNCATEs dropped; and a reload
   (whole-table TRUNCATEs, then upserts not older than them) into a table that holds no rows.
4. delta-rs merges or appends the rows as the batch's (app id, version) through
   :class:`~lakehouse_writer.engines.delta_rs.writes.SmallChanges`: a replay of the batch is a no-op
   for either engine.

Anything else leaves the table to Spark's path, untouched: a row that does not decode, a key
that disagrees, other row types (ARCHIVE, GDPR deletes), a TRUNCATE over stored rows or with
a scope, a value Arrow cannot take as the column's type, a table delta-rs cannot write or
fails to. Spark then decodes and applies the same rows, with its rules, errors and
rejections. A table is applied here whole or not at all.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse_writer.commit import ids
from lakehouse_writer.engines.spark.apply import UPSERT_TYPES, ApplyResult
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.avro_arrow import ArrowDecoder, DecodeError
from lakehouse_writer.read.decode import resolve
from lakehouse_writer.read.framing import HEADER, header_length, header_tag
from lakehouse_writer.read.keys import KeySchemaRef, candidates, key_pairs
from lakehouse_writer.read.ranges import OffsetRanges, messages_per_topic
from lakehouse_writer.rules.merge import ACTION, BASE_TIME, DATAFUSION, merge_clauses
from lakehouse_writer.rules.truncate import Truncate, distinct_truncates
from lakehouse_writer.tables.files import last_log_version
from lakehouse_writer.tables.manager import TableInfo, TableRef
from producer_lib.errors import SchemaError
from producer_lib.schema import ValueSchema
from producer_lib.schema.value_schema import TECHNICAL_FIELD_NAMES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.engines.delta_rs.writes import SmallChanges
    from lakehouse_writer.read.catalog import SchemaCatalog
    from lakehouse_writer.read.scan import Expected
    from lakehouse_writer.route.parallel import Outcome, TableApplier
    from lakehouse_writer.rules.truncate import TruncateLog
    from lakehouse_writer.tables.manager import TableManager

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
_DELETES = ("D", "X")  # a GDPR delete (G) also purges and marks the table: Spark's path
_TAKEN_TYPES = frozenset({*UPSERT_TYPES, *_DELETES, "B", "T"})
_TAKEN = pa.array(sorted(_TAKEN_TYPES), pa.string())
# A table's rows from which DuckDB decodes them, not fastavro: a DuckDB decode costs some 4 ms
# whatever its size, fastavro some 30 us a row (docs/PERFORMANCE.md).
COLUMNS_FROM_ROWS = 500


@dataclass
class Taken:
    """What :meth:`SmallTables.apply` did.

    Attributes:
        results: One per table applied here.
        headers: The headers whose rows are applied here (Spark's path leaves them).
    """

    results: list[ApplyResult] = field(default_factory=list)
    headers: set[bytes] = field(default_factory=set)


class Unfit(Exception):
    """A table is not applied here; the message says why (Spark's path applies it)."""


@dataclass(frozen=True)
class _Table:
    """A small table of the batch, before its rows are read."""

    ref: TableRef
    header: bytes
    schema_json: str
    schema: ValueSchema
    keys: tuple[KeySchemaRef, ...]
    info: TableInfo
    applied: list[Truncate]  # TRUNCATEs of earlier batches


@dataclass(frozen=True)
class _Raw:
    """A table's rows in the batch as they came from Kafka, by column (Arrow)."""

    partitions: pa.Array
    offsets: pa.Array
    keys: pa.Array
    values: pa.Array

    def __len__(self) -> int:
        return len(self.values)

    def where(self, i: int) -> str:
        """Where row ``i`` is, for a message."""
        return f"partition {self.partitions[i].as_py()}, offset {self.offsets[i].as_py()}"


_NO_ROWS = _Raw(*(pa.array([], t) for t in (pa.int32(), pa.int64(), pa.binary(), pa.binary())))


def _by_header(found: pa.Table) -> dict[bytes, _Raw]:
    """Raw rows by header, from rows with each header's together (``BatchScan.rows_of``)."""
    if not found.num_rows:
        return {}
    found = found.combine_chunks()
    columns = [found.column(c).chunk(0) for c in _RAW_COLUMNS]
    runs = pc.run_end_encode(found.column(HEADER).chunk(0))
    by_header: dict[bytes, _Raw] = {}
    start = 0
    for head, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        by_header[bytes(head)] = _Raw(*(c.slice(start, end - start) for c in columns))
        start = end
    return by_header


_RAW_COLUMNS = ("partition", "offset", "key", "value")


@dataclass(frozen=True)
class _Decoded:
    """A table's rows, decoded.

    Attributes:
        payload: The decoded values as columns: by Avro field name (DuckDB's decode), or by
            column name in the table's types (fastavro's).
        avro_of: Column name -> the payload's name of that column.
        rules: What the row rules read, a row per message in batch order: the key columns
            (by column name), ``__change_type``, ``__source_rowid``, ``__time`` (the change
            time in µs), ``__partition``, ``__offset`` and ``__index`` (the row in
            ``payload``).
        truncates: (change time µs, scope or None) of each TRUNCATE row.
    """

    payload: pa.Table
    avro_of: Mapping[str, str]
    rules: pa.Table
    truncates: Sequence[tuple[int, Mapping[str, str | None] | None]] = ()

    def arrow(self, rows: pa.Table, info: TableInfo, actions: bool) -> pa.Table:
        """The payload of ``rows`` (rule rows), in the table's columns and types.

        ``actions``: with the MERGE's action (upsert or delete) and base time columns.

        Raises:
            Unfit: A value Arrow cannot take as its column's type.
        """
        try:
            table = self._taken(rows.column("__index"), _arrow_schema(info))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise Unfit(f"a value Arrow cannot convert to its column's type: {exc}") from exc
        if actions:
            upsert = pc.is_in(rows.column("__change_type"), value_set=_UPSERTS)
            table = table.append_column(
                pa.field(ACTION, pa.string()),
                pc.if_else(upsert, pa.scalar("upsert"), pa.scalar("delete")),
            ).append_column(
                pa.field(BASE_TIME, pa.timestamp("us", "UTC")),
                pa.nulls(rows.num_rows, pa.timestamp("us", "UTC")),
            )
        return table

    def _taken(self, indices: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
        """The payload's rows at ``indices``, cast to ``schema``.

        A table column the writer schema does not have is null, even where another column's
        Avro name is spelled as it (``ORDER DATE`` is ``ORDER_DATE`` in Avro).
        """
        taken = self.payload.take(indices)
        columns = []
        for target in schema:
            technical = target.name if target.name in TECHNICAL_FIELD_NAMES else None
            avro = self.avro_of.get(target.name, technical)  # None: not the schema's column
            if avro is not None and avro in taken.column_names:
                columns.append(taken.column(avro).cast(target.type))
            else:
                columns.append(pa.nulls(taken.num_rows, target.type))
        return pa.Table.from_arrays(columns, schema=schema)


_UPSERTS = pa.array(UPSERT_TYPES, pa.string())


def _arrow_schema(info: TableInfo) -> pa.Schema:
    """The table's columns as an Arrow schema."""
    from pyspark.sql.pandas.types import to_arrow_type

    return pa.schema([pa.field(name, to_arrow_type(dtype)) for name, dtype in info.columns.items()])


class SmallTables:
    """Applies the small tables of a batch in the driver (see the module docstring).

    Args:
        spark: The batch's session (for the one job that collects the rows).
        small: delta-rs's merges; its ``max_rows`` is the most rows a table may have here
            (0 turns this off).
        tables: Creates and evolves the tables.
        catalog: Where the writer schemas come from.
        truncates: The TRUNCATEs of earlier batches.
        instance_id: The writer instance (Delta's txnAppId).
        lakehouse: The lakehouse root: on a path delta-rs does not write (cloud storage),
            nothing is taken here and the scan decodes as before.
        read_rows: The most messages of a batch read into the driver whole (0: none).
    """

    def __init__(
        self,
        spark: SparkSession,
        small: SmallChanges,
        tables: TableManager,
        catalog: SchemaCatalog,
        truncates: TruncateLog,
        instance_id: str,
        lakehouse: str,
        read_rows: int,
    ) -> None:
        self._spark = spark
        self._read_rows = read_rows
        self._small = small
        self._tables = tables
        self._catalog = catalog
        self._truncates = truncates
        self._instance = instance_id
        self._on = small.writes(lakehouse)
        self._parsed: dict[str, Any] = {}  # schema JSON -> fastavro's parsed schema
        self._decoder = ArrowDecoder()

    def warm_up(self) -> None:
        """Load DuckDB's Avro reader now rather than on the first batch's path."""
        if self.max_rows:
            self._decoder.available  # noqa: B018 - opens the connection, loads the extension

    @property
    def max_rows(self) -> int:
        """The most rows of one table applied here; 0: none."""
        return self._small.max_rows if self._on else 0

    def scanned(self, expected: list[Expected], ranges: OffsetRanges | None) -> list[Expected]:
        """The expected schemas the scan is to decode: those of the batch's large topics.

        A topic with at most :attr:`max_rows` messages in the batch (``ranges``: its offset
        ranges) holds only small tables; their rows are decoded here. All of ``expected``
        when the ranges are not known.
        """
        if not self.max_rows or ranges is None:
            return expected
        spans = messages_per_topic(ranges)
        return [e for e in expected if spans.get(e.entry.topic or "", 0) > self.max_rows]

    def takes_batch(self, ranges: OffsetRanges | None, held: OffsetRanges) -> bool:
        """Whether the batch is small enough to read into the driver whole.

        ``ranges``: the batch's offset ranges; ``held``: the ranges of the rows held back
        before, read again in front. At most ``read_rows`` messages in all, and at most
        :attr:`max_rows` in each topic (transaction markers counted): every table of it is
        small enough to be applied here.
        """
        if not self.max_rows or not self._read_rows or ranges is None:
            return False
        spans = messages_per_topic(ranges)
        for (topic, _), (first, end) in held.items():  # read again in front of the batch
            spans[topic] = spans.get(topic, 0) + end - first
        if not spans:
            return True
        return sum(spans.values()) <= self._read_rows and max(spans.values()) <= self.max_rows

    def apply(
        self,
        rows_of: Callable[[Collection[bytes]], pa.Table],
        rows: Mapping[bytes, int],
        decoded: Collection[bytes],
        stopped: Collection[str],
        batch_id: int,
        applier: TableApplier,
        busy: TableRef | None = None,
        topics_of: Callable[[bytes], Collection[str]] | None = None,
    ) -> Taken:
        """Apply the tables of the batch that are small and take no Spark (see above).

        Args:
            rows_of: The raw rows of data topics with the given headers, each header's rows
                together in batch order (:meth:`~lakehouse_writer.read.scan.BatchScan.rows_of`).
            rows: Rows per header of the batch's data topics.
            decoded: Headers the scan decoded (their tables stay on Spark's path).
            stopped: Tables stopped by a schema error (Spark's path rejects their rows).
            batch_id: The micro-batch.
            applier: Runs the tables' work several at a time.
            busy: A table another step applies in this batch (the reload's), left alone.
            topics_of: The topics of a header's rows (a registry's schema names none).
        """
        taken = Taken()
        if not self.max_rows:
            return taken
        started = time.monotonic()
        small = self._small_tables(rows, decoded, stopped, busy, applier, topics_of)
        if not small:
            return taken
        outcomes = []
        for chunk in _chunks(small, rows, self.max_rows):
            outcomes += self._apply_chunk(rows_of, chunk, batch_id, applier)
        left: dict[str, str] = {}
        for outcome in outcomes:
            if isinstance(outcome.error, Unfit):
                left[outcome.item.ref.qualified] = str(outcome.error)
            elif outcome.error is not None:
                raise outcome.error
            else:
                assert outcome.result is not None
                taken.results.append(outcome.result)
                taken.headers.add(outcome.item.header)
        for table, reason in sorted(left.items()):
            log.info(
                "small table left to Spark table=%s batch=%d reason=%s", table, batch_id, reason
            )
        log.info(
            "small tables applied batch=%d tables=%d rows=%d left_to_spark=%d seconds=%.3f",
            batch_id,
            len(taken.results),
            sum(sum(r.rows.values()) for r in taken.results),
            len(left),
            time.monotonic() - started,
        )
        return taken

    def _small_tables(
        self,
        rows: Mapping[bytes, int],
        decoded: Collection[bytes],
        stopped: Collection[str],
        busy: TableRef | None,
        applier: TableApplier,
        topics_of: Callable[[bytes], Collection[str]] | None = None,
    ) -> list[_Table]:
        """The batch's tables that may be applied here, made or evolved for their rows.

        A table qualifies when one writer schema gives all its rows in the batch, the scan
        did not decode them, it has a primary key and no nested payload column, is not
        stopped or ``busy``, and :class:`~lakehouse_writer.engines.delta_rs.writes.SmallChanges`
        takes its row count.
        """
        tags = {header_tag(h): h for h in rows}
        headers_of: dict[TableRef, list[bytes]] = {}
        found: dict[bytes, tuple[str, ValueSchema, str | None]] = {}
        for tag, entry in resolve(set(tags), self._catalog).items():
            try:
                schema = ValueSchema.from_avro_json(entry.schema_json)
            except SchemaError:
                continue  # Spark's path rejects its rows
            ref = TableRef.of(schema)
            headers_of.setdefault(ref, []).append(tags[tag])
            found[tags[tag]] = (entry.schema_json, schema, entry.topic)
        chosen = [
            (ref, headers[0])
            for ref, headers in headers_of.items()
            if len(headers) == 1
            and headers[0] not in decoded
            and rows[headers[0]] <= self.max_rows
            and found[headers[0]][1].pks
            and ref.qualified not in stopped
            and ref != busy
        ]
        self._tables.ensure_all([found[h][1] for _, h in chosen], applier)
        small = []
        for ref, header in chosen:
            schema_json, schema, topic = found[header]
            try:
                info = self._tables.ensure(schema)
            except LakehouseWriterError:
                continue  # Spark's path reports it (and stops the table)
            if info.keys and _plain(info) and self._small.takes(info, rows[header]):
                topics = [topic] if topic or topics_of is None else topics_of(header)
                keys = candidates(schema, self._catalog.key_schemas(topics))
                applied = self._truncates.of(ref.qualified)
                small.append(_Table(ref, header, schema_json, schema, keys, info, applied))
        return small

    def _apply_chunk(
        self,
        rows_of: Callable[[Collection[bytes]], pa.Table],
        chunk: list[_Table],
        batch_id: int,
        applier: TableApplier,
    ) -> list[Outcome[_Table, ApplyResult]]:
        """Collect the raw rows of ``chunk``'s tables, then apply each (several at once)."""
        raw = _by_header(rows_of([t.header for t in chunk]))
        return applier.map(
            lambda t, _: self._apply_one(t, raw.get(t.header, _NO_ROWS), batch_id), chunk
        )

    def _apply_one(self, table: _Table, raw: _Raw, batch_id: int) -> ApplyResult:
        """Decode, check and apply one table's rows; :class:`Unfit` when Spark is to."""
        info = table.info
        app_id = ids.app_id_for(self._instance, table.ref.qualified)
        look = self._small.look(info, app_id)
        if look is None:
            raise Unfit("delta-rs cannot write the table")
        decoded = self._decode(table, raw)
        rows = decoded.rules
        counts = _counts(rows)
        truncates = distinct_truncates(decoded.truncates)
        version = ids.txn_version(batch_id, ids.STEP_ROWS)
        if look.done is not None and look.done >= ids.txn_version(batch_id, 0):
            if look.done < version:
                raise Unfit("Spark applied part of the batch to the table before")
            log.info(
                "small table skipped table=%s batch=%d: applied (replay)",
                info.ref.qualified,
                batch_id,
            )
            return self._result(info, counts, truncates, reload=False)
        kept = _kept(table.applied, rows.filter(pc.not_equal(rows.column("__change_type"), "T")))
        reload = bool(truncates)
        if reload:
            _check_reload(truncates, kept, look.empty)
        latest = _latest_per_key(_moved_keys(kept, info.keys), info.keys)
        if reload:
            done = not latest.num_rows or self._small.append(
                lambda: decoded.arrow(latest, info, actions=False), info, app_id, version
            )
        else:
            key_range = _key_range(latest, info.keys[0])
            clauses = merge_clauses(
                list(info.columns), info.keys, TECHNICAL_FIELD_NAMES, DATAFUSION, key_range
            )
            done = self._small.merge(
                lambda: decoded.arrow(latest, info, actions=True), info, clauses, app_id, version
            )
        if not done:
            raise Unfit("delta-rs did not write the rows")
        return self._result(info, counts, truncates, reload)

    def _decode(self, table: _Table, raw: _Raw) -> _Decoded:
        """The rows by column name, with ``partition``/``offset``; keys checked.

        With at least :data:`COLUMNS_FROM_ROWS` rows, DuckDB decodes them into columns where it
        reads every field of the value and key schemas (:mod:`lakehouse_writer.read.avro_arrow`);
        fastavro decodes them one by one otherwise.
        """
        names = {f.name for f in table.schema.fields.values()}
        if not set(table.info.keys) <= names:
            raise Unfit("the table's key columns are not all in the writer schema")
        if (
            len(raw) >= COLUMNS_FROM_ROWS
            and self._decoder.decodes(table.schema_json)
            and all(self._decoder.decodes(ref.schema_json) for ref in table.keys)
        ):
            return self._decode_columns(table, raw)
        return self._decode_rows(table, raw)

    def _decode_rows(self, table: _Table, raw: _Raw) -> _Decoded:
        """Decode with fastavro, a row at a time; the payload in the table's columns."""
        from fastavro import schemaless_reader

        parsed = self._parse(table.schema_json)
        keys = [
            (ref, key_pairs(table.schema, ref), self._parse(ref.schema_json)) for ref in table.keys
        ]
        skip = header_length(header_tag(table.header))
        fields = [(table.info.column(f.name), f.avro_name) for f in table.schema.fields.values()]
        values, kafka_keys = raw.values.to_pylist(), raw.keys.to_pylist()
        rows, truncates = [], []
        for i, body in enumerate(values):
            where = raw.where(i)
            try:
                value: Any = schemaless_reader(io.BytesIO(body[skip:]), parsed, None)
            except Exception as exc:  # fastavro raises what the bytes happen to trip
                raise Unfit(f"a value does not decode ({where}): {exc!r}") from exc
            change = value.get("__change_type") if isinstance(value, dict) else None
            if change not in _TAKEN_TYPES:
                raise Unfit(f"row type {change!r} ({where})")
            _check_key(kafka_keys[i], value, keys, where)
            row = {name: value.get(avro) for name, avro in fields}
            row.update({name: value.get(name) for name in TECHNICAL_FIELD_NAMES})
            rows.append(row)
            if change == "T":
                truncates.append((_micros(value["__change_time"]), value.get("__truncate")))
        try:
            payload = pa.Table.from_pylist(rows, schema=_arrow_schema(table.info))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise Unfit(f"a value Arrow cannot convert to its column's type: {exc}") from exc
        technical = {
            "__change_type": pa.array([r["__change_type"] for r in rows], pa.string()),
            "__source_rowid": pa.array([r["__source_rowid"] for r in rows], pa.string()),
            "__time": pa.array([_micros(r["__change_time"]) for r in rows], pa.int64()),
        }
        keys_of = {k: payload.column(k) for k in table.info.keys}
        by_name = {name: name for name in payload.column_names}
        return _Decoded(payload, by_name, _rules(keys_of, technical, raw), truncates)

    def _decode_columns(self, table: _Table, raw: _Raw) -> _Decoded:
        """DuckDB's decode into columns (by Avro name); the keys checked in columns too."""
        skip = header_length(header_tag(table.header))
        try:
            payload = self._decoder.decode(table.schema_json, _after(raw.values, skip))
        except DecodeError as exc:
            raise Unfit(f"the values do not decode: {exc}") from exc
        changes = payload.column("__change_type")
        wrong = _first(pc.invert(pc.fill_null(pc.is_in(changes, value_set=_TAKEN), False)))
        if wrong is not None:
            raise Unfit(f"row type {changes[wrong].as_py()!r} ({raw.where(wrong)})")
        self._check_keys(table, raw, payload)
        avro_of = {table.info.column(f.name): f.avro_name for f in table.schema.fields.values()}
        technical = {
            "__change_type": changes,
            "__source_rowid": payload.column("__source_rowid"),
            "__time": payload.column("__change_time").cast(pa.int64()),
        }
        keys_of = {k: payload.column(avro_of[k]) for k in table.info.keys}
        is_truncate = pc.equal(changes, "T")
        truncates = []
        if pc.any(is_truncate).as_py():
            at = payload.filter(is_truncate)
            scopes = at.column("__truncate").to_pylist()
            times = at.column("__change_time").cast(pa.int64()).to_pylist()
            truncates = [
                (t, dict(scope) if scope is not None else None)
                for t, scope in zip(times, scopes, strict=True)
            ]
        return _Decoded(payload, avro_of, _rules(keys_of, technical, raw), truncates)

    def _check_keys(self, table: _Table, raw: _Raw, payload: pa.Table) -> None:
        """:class:`Unfit` unless every row's Kafka key agrees with its value."""
        schema_of = pa.nulls(len(raw), pa.int32())  # the key schema (of table.keys) of a row
        for j, ref in reversed(list(enumerate(table.keys))):  # the first that matches wins
            framed = pc.equal(pc.binary_slice(raw.keys, 0, len(ref.header)), ref.header)
            schema_of = pc.if_else(pc.fill_null(framed, False), j, schema_of)
        unknown = _first(pc.is_null(schema_of))
        if unknown is not None:
            where = raw.where(unknown)
            raise Unfit(f"a Kafka key is missing or of an unknown writer schema ({where})")
        for j, ref in enumerate(table.keys):
            indices = pc.indices_nonzero(pc.equal(schema_of, j))
            if not len(indices):
                continue
            pairs = key_pairs(table.schema, ref)
            if isinstance(pairs, str):
                raise Unfit(pairs)
            bodies = _after(raw.keys.take(indices), len(ref.header))
            try:
                decoded = self._decoder.decode(ref.schema_json, bodies)
            except DecodeError as exc:
                raise Unfit(f"a Kafka key does not decode: {exc}") from exc
            values = payload.take(indices)
            for key_field, value_field in pairs:
                agree = pc.fill_null(
                    pc.equal(
                        decoded.column(key_field.avro_name), values.column(value_field.avro_name)
                    ),
                    False,
                )
                first = _first(pc.invert(agree))
                if first is not None:
                    where = raw.where(indices[first].as_py())
                    raise Unfit(f"a Kafka key disagrees with its value ({where})")

    def _parse(self, schema_json: str) -> Any:
        from fastavro import parse_schema

        parsed = self._parsed.get(schema_json)
        if parsed is None:
            parsed = self._parsed[schema_json] = parse_schema(json.loads(schema_json))
        return parsed

    def _result(
        self, info: TableInfo, counts: Counter[str], truncates: list[Truncate], reload: bool
    ) -> ApplyResult:
        return ApplyResult(
            info.ref.qualified,
            dict(counts),
            tuple(truncates),
            fast_path=reload,
            gdpr_purged=False,
            version=last_log_version(self._spark, info.path),
            rejected=None,
            small=True,
        )


def _chunks(small: list[_Table], rows: Mapping[bytes, int], budget: int) -> list[list[_Table]]:
    """``small`` in runs of at most ``budget`` rows together: the rows the driver holds at once.

    No table has more rows than ``budget`` (:meth:`SmallTables._small_tables`).
    """
    chunks: list[list[_Table]] = []
    held = budget
    for table in small:
        if held + rows[table.header] > budget:
            chunks.append([])
            held = 0
        chunks[-1].append(table)
        held += rows[table.header]
    return chunks


def _plain(info: TableInfo) -> bool:
    """True when every payload column has a plain type (no struct, array or map).

    fastavro names a nested record's fields by their Avro names, the table by the original
    ones: such tables are Spark's (the technical maps hold text only).
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    nested = (ArrayType, MapType, StructType)
    return not any(
        isinstance(dtype, nested)
        for name, dtype in info.columns.items()
        if name not in TECHNICAL_FIELD_NAMES
    )


def _check_key(
    key: bytes | None,
    value: dict[str, Any],
    keys: list[tuple[KeySchemaRef, Any, Any]],
    where: str,
) -> None:
    """:class:`Unfit` unless the row's key agrees with its value (Spark's path says why)."""
    from fastavro import schemaless_reader

    found = next((k for k in keys if key is not None and key.startswith(k[0].header)), None)
    if found is None:
        raise Unfit(f"a Kafka key is missing or of an unknown writer schema ({where})")
    ref, pairs, parsed = found
    assert key is not None
    if isinstance(pairs, str):
        raise Unfit(pairs)
    try:
        decoded: Any = schemaless_reader(io.BytesIO(key[len(ref.header) :]), parsed, None)
    except Exception as exc:
        raise Unfit(f"a Kafka key does not decode ({where})") from exc
    for key_field, value_field in pairs:
        part = decoded.get(key_field.avro_name) if isinstance(decoded, dict) else None
        if part is None or part != value.get(value_field.avro_name):
            raise Unfit(f"a Kafka key disagrees with its value ({where})")


def _rules(keys: Mapping[str, Any], technical: Mapping[str, Any], raw: _Raw) -> pa.Table:
    """The table the row rules read (:attr:`_Decoded.rules`)."""
    return pa.table(
        {
            **keys,
            **technical,
            "__partition": raw.partitions,
            "__offset": raw.offsets,
            "__index": pa.array(range(len(raw)), pa.int64()),
        }
    )


def _after(framed: pa.Array, skip: int) -> pa.Array:
    """``framed`` without its first ``skip`` bytes (its header).

    With an explicit end: pyarrow 26's ``binary_slice`` fails on a slice of an array (a
    table's rows of a batch) when the end is left open.
    """
    return pc.binary_slice(framed, skip, _NO_END)


_NO_END = 2**31 - 1  # longer than any value of a binary column


def _first(mask: pa.Array | pa.ChunkedArray) -> int | None:
    """The first row where ``mask`` is true; None: none."""
    found = pc.index(mask, True).as_py()
    return None if found < 0 else found


def _counts(rows: pa.Table) -> Counter[str]:
    """Rows per change type."""
    counted = pc.value_counts(rows.column("__change_type")).to_pylist()
    return Counter({c["values"]: c["counts"] for c in counted})


def _kept(applied: list[Truncate], rows: pa.Table) -> pa.Table:
    """``rows`` but those the whole-table TRUNCATEs ``applied`` (of earlier batches) cover."""
    oldest = pc.min(rows.column("__time")).as_py()
    if oldest is None:
        return rows
    if any(not t.unscoped and t.time_us > oldest for t in applied):
        raise Unfit("a scoped TRUNCATE of an earlier batch may cover its rows")
    cut = max((t.time_us for t in applied if t.unscoped), default=None)
    return rows if cut is None else rows.filter(pc.greater_equal(rows.column("__time"), cut))


def _check_reload(truncates: list[Truncate], kept: pa.Table, empty: bool) -> None:
    """:class:`Unfit` unless the batch reloads an empty table (see the module docstring)."""
    if any(not t.unscoped for t in truncates):
        raise Unfit("a scoped TRUNCATE")
    if not empty:
        raise Unfit("a TRUNCATE over stored rows (Spark deletes them)")
    latest = truncates[-1].time_us
    if pc.any(pc.less(kept.column("__time"), latest)).as_py():
        raise Unfit("rows older than the batch's TRUNCATE")
    if pc.any(pc.invert(pc.is_in(kept.column("__change_type"), value_set=_UPSERTS))).as_py():
        raise Unfit("rows other than upserts beside a TRUNCATE")


def _moved_keys(rows: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """``rows`` but the BEFORE images, of which those whose UPDATE moved the key are kept.

    Those delete their (old) key. A BEFORE image's UPDATE has the same change time and the
    same ``__source_rowid``, or, without one, is the row right after it (same partition,
    next offset): :func:`lakehouse_writer.engines.spark.apply.moved_keys`.
    """
    change = rows.column("__change_type")
    is_before = pc.equal(change, "B")
    if not pc.any(is_before).as_py():
        return rows
    befores = rows.filter(is_before)
    befores = befores.append_column("__next", pc.add(befores.column("__offset"), 1))
    updates = rows.filter(pc.equal(change, "U"))
    updates = updates.append_column("__next", updates.column("__offset"))
    by_rowid = pc.is_valid(befores.column("__source_rowid"))
    pairs = [  # (a BEFORE image's __index, its key, its UPDATE's key) in __old*, __new*
        _side(befores.filter(where), on, keys, "__old").join(
            _side(updates, on, keys, "__new").drop_columns(["__index"]), on, join_type="inner"
        )
        for where, on in ((by_rowid, _BY_ROWID), (pc.invert(by_rowid), _BY_POSITION))
    ]
    old = [f"__old{i}" for i in range(len(keys))]
    new = [f"__new{i}" for i in range(len(keys))]
    moved: set[int] = set()
    for paired in pairs:
        differs = reduce(
            pc.or_,
            (_differ(paired.column(o), paired.column(n)) for o, n in zip(old, new, strict=True)),
        )
        moved.update(paired.filter(differs).column("__index").to_pylist())
    kept_before = pc.is_in(rows.column("__index"), value_set=pa.array(sorted(moved), pa.int64()))
    return rows.filter(pc.or_(pc.invert(is_before), kept_before))


_BY_ROWID = ["__time", "__source_rowid"]  # an UPDATE and its BEFORE image share these
_BY_POSITION = ["__time", "__partition", "__next"]  # or it is the next message


def _side(rows: pa.Table, on: list[str], keys: tuple[str, ...], prefix: str) -> pa.Table:
    """``rows``' join columns ``on``, ``__index`` and keys (renamed ``prefix`` + position)."""
    columns = {c: rows.column(c) for c in [*on, "__index"]}
    return pa.table(columns | {f"{prefix}{i}": rows.column(k) for i, k in enumerate(keys)})


def _differ(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    """Where ``a`` and ``b`` differ, NULL equal to NULL only."""
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.and_(pc.invert(both_null), pc.fill_null(pc.not_equal(a, b), True))


def _latest_per_key(rows: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """One row per key: the last by (change time, partition, offset)."""
    ordered = rows.sort_by(
        [("__time", "ascending"), ("__partition", "ascending"), ("__offset", "ascending")]
    )
    ordered = ordered.append_column("__rank", pa.array(range(ordered.num_rows), pa.int64()))
    last = ordered.group_by(list(keys), use_threads=False).aggregate([("__rank", "max")])
    return ordered.take(last.column("__rank_max")).drop_columns(["__rank"])


def _key_range(rows: pa.Table, column: str) -> tuple[Any, Any] | None:
    """Lowest and highest value of ``column`` in ``rows``; None when one is NULL or none."""
    values = rows.column(column)
    if not len(values) or values.null_count:
        return None
    try:
        bounds = pc.min_max(values).as_py()
    except pa.ArrowNotImplementedError:
        return None
    return bounds["min"], bounds["max"]


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICRO
