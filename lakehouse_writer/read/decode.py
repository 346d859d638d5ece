"""Kafka → decoded change rows, on the JVM.

The Kafka source (read_committed, subscribePattern) gives raw ``key``/``value`` bytes. A batch
is split by the value's header: ``0x00`` + 4-byte registry id (Confluent) or ``0xC3 0x01`` +
8-byte fingerprint (single object). Each distinct writer schema gets one ``from_avro``
expression (``mode=PERMISSIVE``) over the bytes after the header; the decoded fields are
renamed to their original names. Rows without a header, with an unknown schema, or whose bytes
do not decode become ``_rejected`` rows; the stream goes on.

The writer decodes the schemas it expects while it reads the batch
(:mod:`lakehouse_writer.read.scan`); :func:`decode_batch` takes those rows as they are and decodes
the others here, from the cached bytes.

Keys are decoded too, in the projection that decodes the value, and checked against the key
fields of the value (:mod:`lakehouse_writer.read.keys`): a row whose key disagrees, does not decode,
or is missing (table with a primary key) is rejected with the reason. The key schemas are the
one this project's producer writes with the value schema and those of the topic in the catalog
(:meth:`~lakehouse_writer.read.catalog.SchemaCatalog.key_schemas`). The scan decodes with the first
only; rows it did not take (a key that fails, or one of another key schema) are decoded again
here, from their bytes, with all of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse_writer.errors import LakehouseWriterError, TableError
from lakehouse_writer.read.catalog import CatalogEntry, SchemaCatalog
from lakehouse_writer.read.framing import (
    HEADER,
    avro_struct,
    body_column,
    header_length,
    header_tag,
)
from lakehouse_writer.read.keys import KeySchemaRef, candidates, with_key_check
from lakehouse_writer.read.rejected import rejected_rows
from lakehouse_writer.read.summary import RowSummary, summary_aggregates
from lakehouse_writer.tables.manager import TableInfo, TableManager, TableRef
from producer_lib.errors import SchemaError
from producer_lib.schema import TECHNICAL_FIELDS, ValueSchema

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from pyspark.sql import Column, DataFrame

    from lakehouse_writer.runtime.parallel import TableApplier
    from lakehouse_writer.settings import LakehouseSettings

log = logging.getLogger(__name__)

SOURCE_DEFAULTS = {
    "startingOffsets": "earliest",
    "kafka.isolation.level": "read_committed",  # never apply rows of open/aborted transactions
    "failOnDataLoss": "true",  # a lost offset range must stop the writer, not skip rows
    "includeHeaders": "false",
    # A fetch at the end of a partition waits this long for more data; at the consumer's
    # default (500 ms) every micro-batch paid about 1 s just for reaching its end offsets.
    "kafka.fetch.max.wait.ms": "10",
}


@dataclass(frozen=True)
class DecodedBatch:
    """One micro-batch, decoded.

    Attributes:
        tables: Per table: its (created/evolved) Delta table and its decoded rows.
        rejected: ``_rejected`` rows (decode errors, schema evolution errors); only frames
            that hold rows.
        errors: Table-level errors of this batch, by table (``namespace.name``).
        cached: Frames persisted by the decode (one per writer schema); the caller unpersists
            them once the batch is written.
        summaries: Per table: counts per change type and key range of its decoded rows,
            from the pass that decodes them (for
            :func:`~lakehouse_writer.engines.table.apply_table`).
        schemas: The writer schemas the batch held, by header (the next batch expects them).
        keys: By header of ``schemas``: the key writer schemas of its topic in the catalog
            (:meth:`~lakehouse_writer.read.catalog.SchemaCatalog.key_schemas`), for the next
            batch's scan (:meth:`~lakehouse_writer.read.scan.ExpectedSchemas.saw`).
    """

    tables: dict[TableRef, tuple[TableInfo, DataFrame]] = field(default_factory=dict)
    rejected: list[DataFrame] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    cached: list[DataFrame] = field(default_factory=list)
    summaries: dict[TableRef, RowSummary] = field(default_factory=dict)
    schemas: dict[bytes, CatalogEntry] = field(default_factory=dict)
    keys: dict[bytes, tuple[KeySchemaRef, ...]] = field(default_factory=dict)


def resolve(headers: set[str], catalog: SchemaCatalog) -> dict[str, CatalogEntry]:
    """Writer schemas of the given header tags; unknown tags are absent."""
    fingerprints = {h[2:] for h in headers if h.startswith("f:")}
    ids = {int(h[2:]) for h in headers if h.startswith("c:")}
    found = {f"f:{fp}": e for fp, e in catalog.by_fingerprint(fingerprints).items()}
    found.update({f"c:{i}": e for i, e in catalog.by_id(ids).items()})
    return found


def decode_batch(
    df: DataFrame,
    catalog: SchemaCatalog,
    tables: TableManager,
    stopped: dict[str, str],
    headers: set[bytes | None],
    decoded: Mapping[bytes, Decoded] | None = None,
    applier: TableApplier | None = None,
    topics_of: Callable[[bytes], Collection[str]] | None = None,
) -> DecodedBatch:
    """Decode the data-topic rows of one batch (``df``: the scan's cached frame).

    Args:
        df: The batch's rows of data topics (system topics already split off), with their
            headers (``HEADER``).
        catalog: Where writer schemas come from.
        tables: Creates/evolves the target tables.
        stopped: Tables stopped by a schema error, with the error; their rows are rejected.
            A table stopped by this batch is added.
        headers: The distinct headers (:func:`header_column`) of ``df``, None for rows
            without one.
        decoded: Rows already decoded by the scan, by header; the rows of those headers in
            ``df`` are not decoded again.
        applier: Runs work of several tables at a time: with it, the batch's tables are
            created or evolved first, and the rows of the schemas the scan did not decode
            are decoded, cached and summarized, several at a time (:func:`_parse_ahead`).
            What fails there is done again one by one, where its errors are reported.
        topics_of: The topics of the rows of a header
            (:meth:`~lakehouse_writer.read.scan.BatchScan.topics_of`): a registry's value schema
            names none, and its rows' key schemas are those of their topics.
    """
    from pyspark.sql import functions as F

    tags = {header_tag(h): h for h in headers if h is not None}
    entries = resolve(set(tags), catalog)
    keys = {
        tag: catalog.key_schemas(
            [entry.topic] if entry.topic or topics_of is None else topics_of(tags[tag])
        )
        for tag, entry in entries.items()
    }
    out = DecodedBatch()
    done: dict[bytes, Decoded] = dict(decoded or {})
    if applier is not None:
        schemas = _value_schemas(entries, stopped)
        tables.ensure_all(schemas.values(), applier)
        todo = {tag: schema for tag, schema in schemas.items() if tags[tag] not in done}
        ahead = _parse_ahead(df, tags, entries, todo, tables, applier, keys)
        out.cached.extend(p.parsed for p in ahead.values())
        done.update(ahead)
    if None in headers:
        out.rejected.append(rejected_rows(df.filter(F.col(HEADER).isNull()), _NO_HEADER, None))
    for tag in sorted(tags.keys() - entries.keys()):
        unknown = df.filter(F.col(HEADER) == F.lit(tags[tag]))
        out.rejected.append(rejected_rows(unknown, _UNKNOWN + tag, None))
    for tag, entry in sorted(entries.items()):
        out.schemas[tags[tag]] = entry
        out.keys[tags[tag]] = tuple(keys[tag])
        rows = df.filter(F.col(HEADER) == F.lit(tags[tag]))
        _decode_one(rows, tag, entry, tables, stopped, out, done.get(tags[tag]), keys[tag])
    return out


@dataclass(frozen=True)
class Decoded:
    """The rows of one writer schema, decoded by the batch's scan or ahead of it.

    Attributes:
        parsed: :func:`parse_rows` of them (``topic``, ``partition``, ``offset``, ``key``,
            ``value`` and the decoded value ``__r``), cached.
        summary: Counts per change type and key range of the rows that decoded.
        failures: Rows that did not decode.
        by_scan: Decoded by the scan's shared projection (:mod:`lakehouse_writer.read.scan`),
            whose failures are decoded again on their own before they are rejected.
    """

    parsed: DataFrame
    summary: RowSummary
    failures: int
    by_scan: bool = False


def _value_schemas(
    entries: Mapping[str, CatalogEntry], stopped: Mapping[str, str]
) -> dict[str, ValueSchema]:
    """The value schemas of ``entries`` by tag, but those of stopped tables or not valid."""
    schemas = {}
    for tag, entry in entries.items():
        try:
            schema = ValueSchema.from_avro_json(entry.schema_json)
        except SchemaError:
            continue  # the decode rejects its rows
        if TableRef.of(schema).qualified not in stopped:
            schemas[tag] = schema
    return schemas


def _parse_ahead(
    df: DataFrame,
    tags: Mapping[str, bytes],
    entries: Mapping[str, CatalogEntry],
    schemas: Mapping[str, ValueSchema],
    tables: TableManager,
    applier: TableApplier,
    keys: Mapping[str, list[KeySchemaRef]],
) -> dict[bytes, Decoded]:
    """Decode, cache and summarize the rows of each of ``schemas``, several at a time.

    Each schema costs a job over the cached batch whatever its rows: a batch over many
    tables runs them side by side. By header; a schema that fails is left out (its rows
    are decoded again one by one, and the error reported there).
    """
    from pyspark.sql import functions as F

    def one(tag: str, _: object) -> Decoded:
        info = tables.ensure(schemas[tag])
        rows = df.filter(F.col(HEADER) == F.lit(tags[tag]))
        found = candidates(schemas[tag], keys[tag])
        parsed = parse_rows(rows, tag, entries[tag].schema_json, schemas[tag], found).persist()
        try:
            summary, failures = _summarize(parsed, schemas[tag], info)
        except BaseException:
            parsed.unpersist()
            raise
        return Decoded(parsed, summary, failures)

    outcomes = applier.map(one, sorted(schemas))
    return {tags[o.item]: o.result for o in outcomes if o.result is not None}


_NO_HEADER = (
    "value has neither a Confluent (0x00 + id) nor a single-object (0xC3 0x01 + fingerprint) "
    "header (or is null); was it written by another producer?"
)
_UNKNOWN = "unknown writer schema (not on _schemas / the registry): "


def _decode_one(
    rows: DataFrame,
    tag: str,
    entry: CatalogEntry,
    tables: TableManager,
    stopped: dict[str, str],
    out: DecodedBatch,
    scanned: Decoded | None,
    known_keys: list[KeySchemaRef],
) -> None:
    try:
        schema = ValueSchema.from_avro_json(entry.schema_json)
    except SchemaError as exc:
        out.rejected.append(rejected_rows(rows, f"not a value schema ({tag}): {exc}", None))
        return
    ref = TableRef.of(schema)
    if ref.qualified in stopped:
        message = _stopped_message(ref.qualified, stopped[ref.qualified])
        out.rejected.append(rejected_rows(rows, message, ref.qualified))
        return
    try:
        info = tables.ensure(schema)
    except LakehouseWriterError as exc:
        _stop(rows, ref, exc, stopped, out)
        return
    keys = candidates(schema, known_keys)
    if scanned is not None:
        parsed, failures = scanned.parsed, scanned.failures
        summary = scanned.summary  # its key range is of the schema's first key column
        if tuple(info.keys[:1]) != tuple(schema.pks[:1]):
            summary = RowSummary(summary.counts, None, summary.oldest, summary.truncates)
    else:
        parsed = parse_rows(rows, tag, entry.schema_json, schema, keys).persist()
        out.cached.append(parsed)
        summary, failures = _summarize(parsed, schema, info)  # decodes (and caches) the rows
    decoded, failed = split_parsed(parsed, schema, info)
    if failures and scanned is not None and scanned.by_scan:
        again = parse_rows(failed, tag, entry.schema_json, schema, keys).persist()
        out.cached.append(again)
        more, failures = _summarize(again, schema, info)
        summary = summary.merge(more)
        decoded_again, failed = split_parsed(again, schema, info)
        decoded = decoded.unionByName(decoded_again)
    if failures:
        out.rejected.append(rejected_rows(failed, _failure_reason(failed, tag), ref.qualified))
    previous = out.tables.get(ref)
    if previous is not None:
        decoded = previous[1].unionByName(decoded, allowMissingColumns=True)
        summary = out.summaries[ref].merge(summary)
    out.tables[ref] = (info, decoded)
    out.summaries[ref] = summary


def _summarize(parsed: DataFrame, schema: ValueSchema, info: TableInfo) -> tuple[RowSummary, int]:
    """The :class:`~lakehouse_writer.read.summary.RowSummary` of the rows that decoded.

    Also how many did not decode (their change type is null).
    """
    from pyspark.sql import functions as F

    first = schema.fields.get(info.keys[0]) if info.keys else None
    key = F.col(f"__r.`{first.avro_name}`") if first is not None else None
    change = F.col("__r.__change_type")
    aggregates = summary_aggregates(
        key, F.col("__r.__change_time"), change, F.col("__r.__truncate")
    )
    groups = parsed.groupBy(change.alias("change")).agg(*aggregates).collect()
    failures = sum(g["n"] for g in groups if g[0] is None)
    return RowSummary.of_groups(g for g in groups if g[0] is not None), failures


def _stopped_message(table: str, error: str) -> str:
    return (
        f"table stopped by an earlier schema error: {error}; fix the table, then run "
        f"`lakehouse-writer resume-table {table}` with the writer down (docs/OPERATIONS.md)"
    )


def _stop(
    rows: DataFrame,
    ref: TableRef,
    exc: LakehouseWriterError,
    stopped: dict[str, str],
    out: DecodedBatch,
) -> None:
    """Reject ``rows``; a :class:`~lakehouse_writer.errors.TableError` also stops the table.

    A stopped table's rows decoded earlier in this batch are rejected too: none are applied.
    """
    out.errors[ref.qualified] = str(exc)
    out.rejected.append(rejected_rows(rows, str(exc), ref.qualified))
    if not isinstance(exc, TableError):
        log.error("rows rejected table=%s error=%s", ref.qualified, exc)
        return
    log.error("table stopped table=%s error=%s", ref.qualified, exc)
    stopped[ref.qualified] = str(exc)
    earlier = out.tables.pop(ref, None)
    out.summaries.pop(ref, None)
    if earlier is not None:
        message = _stopped_message(ref.qualified, str(exc))
        out.rejected.append(rejected_rows(earlier[1], message, ref.qualified))


def parse_rows(
    rows: DataFrame,
    tag: str,
    schema_json: str,
    schema: ValueSchema | None = None,
    keys: tuple[KeySchemaRef, ...] = (),
) -> DataFrame:
    """Where each row was read, and its decoded value ``__r`` (null when it does not decode).

    The raw bytes are left out: the writer persists this frame, and a copy of every value
    would double the memory it takes. Rejected rows get their bytes back from the batch
    (:func:`with_raw_bytes`). With ``schema`` (the value schema of ``schema_json``), each
    row's key is checked with ``keys`` (:func:`~lakehouse_writer.read.keys.with_key_check`): where
    it fails, ``__r`` is null and ``__key_problem`` says why.
    """
    decoded = avro_struct(body_column(header_length(tag)), schema_json).alias("__r")
    if schema is None:
        return rows.select("topic", "partition", "offset", decoded)
    parsed = rows.select("topic", "partition", "offset", "key", decoded)
    checked = with_key_check(parsed, "__r", schema, keys, problem=KEY_PROBLEM)
    return checked.drop("key")


KEY_PROBLEM = "__key_problem"


def _failure_reason(failed: DataFrame, tag: str) -> Column | str:
    """Why rows of ``split_parsed`` failed: their key's problem, else the body's."""
    from pyspark.sql import functions as F

    body = f"cannot decode the Avro body ({tag})"
    if KEY_PROBLEM not in failed.columns:
        return body
    return F.coalesce(F.col(KEY_PROBLEM), F.lit(body))


def split_parsed(
    parsed: DataFrame, schema: ValueSchema, info: TableInfo | None = None
) -> tuple[DataFrame, DataFrame]:
    """(decoded rows by original names, rows whose bytes did not decode) of ``parse_rows``.

    With ``info`` (the table the rows land in) a column is named as the table spells it
    (:meth:`~lakehouse_writer.tables.manager.TableInfo.column`), whatever case the schema uses.
    """
    from pyspark.sql import functions as F

    name = info.column if info is not None else str
    ok = F.col("__r").isNotNull() & F.col("__r.__change_type").isNotNull()
    payload = [F.col(f"__r.`{f.avro_name}`").alias(name(f.name)) for f in schema.fields.values()]
    technical = [F.col(f"__r.`{f.name}`").alias(f.name) for f in TECHNICAL_FIELDS]
    decoded = parsed.filter(ok).select(*payload, *technical, "topic", "partition", "offset")
    return decoded, parsed.filter(~ok).drop("__r")


def with_raw_bytes(rejected: DataFrame, batch: DataFrame) -> DataFrame:
    """``_rejected`` rows with the key and value bytes of ``batch`` filled in where missing.

    Rows decoded before they were rejected carry no bytes; they are found again in the
    batch by (topic, partition, offset). Rejected rows are few, so the batch side is
    filtered to their partitions' offsets by the join, not copied.
    """
    from pyspark.sql import functions as F

    where = ["topic", "partition", "offset"]
    raw = batch.select(*where, F.col("key").alias("__k"), F.col("value").alias("__v"))
    joined = rejected.join(raw, where, "left")
    return joined.select(
        *[
            F.coalesce(c, f"__{c[0]}").alias(c) if c in ("key", "value") else F.col(c)
            for c in rejected.columns
        ]
    )


def source_options(settings: LakehouseSettings) -> dict[str, str]:
    """The Kafka source's options but the subscription and limits (connection, isolation)."""
    return {**SOURCE_DEFAULTS, **settings.spark_kafka_options()}
