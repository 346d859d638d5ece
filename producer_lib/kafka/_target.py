"""Targets: a topic with its key/value schemas, framing headers and encoders.

Also the checks that input rows fit a target before anything is encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from producer_lib.errors import EncodeError, SchemaError
from producer_lib.kafka._encode import Encoding
from producer_lib.kafka.catalog import SchemaCatalog
from producer_lib.schema.encoder import AvroEncoder
from producer_lib.schema.rows import rows_to_arrow
from producer_lib.schema.value_schema import TECHNICAL_FIELD_NAMES, KeySchema, ValueSchema

__all__ = ["Target", "build_target", "check_columns", "relation", "row_table"]


@dataclass(frozen=True)
class Target:
    """Where the rows of one table go, and how they are encoded.

    Attributes:
        topic: Kafka topic.
        schema_name: Name the flow gave the schema.
        table: ``<namespace>.<name>`` of the value schema (original names).
        key_schema: Key schema.
        value_schema: Value schema.
        partitions: Partitions of the topic.
        key_header: Framing header of every key.
        value_header: Framing header of every value.
        key_encoder: Encoder of the key schema.
        value_encoder: Encoder of the value schema.
    """

    topic: str
    schema_name: str
    table: str
    key_schema: KeySchema
    value_schema: ValueSchema
    partitions: int
    key_header: bytes
    value_header: bytes
    key_encoder: AvroEncoder
    value_encoder: AvroEncoder

    @property
    def encoding(self) -> Encoding:
        """How this target's rows are encoded (:func:`~producer_lib.kafka._encode.encode_batch`)."""
        return Encoding(
            self.key_encoder,
            self.value_encoder,
            self.key_header,
            self.value_header,
            self.partitions,
        )


def build_target(
    topic: str,
    schema_name: str,
    key_schema: KeySchema,
    value_schema: ValueSchema,
    partitions: int,
    catalog: SchemaCatalog,
) -> Target:
    """Register both schemas with ``catalog`` and build the target's encoders."""
    key_json = key_schema.to_avro_json()
    value_json = value_schema.to_avro_json()
    return Target(
        topic=topic,
        schema_name=schema_name,
        table=f"{value_schema.namespace}.{value_schema.name}",
        key_schema=key_schema,
        value_schema=value_schema,
        partitions=partitions,
        key_header=catalog.register(topic, "key", key_json),
        value_header=catalog.register(topic, "value", value_json),
        key_encoder=AvroEncoder(key_json),
        value_encoder=AvroEncoder(value_json),
    )


def check_columns(columns: Sequence[str], target: Target) -> None:
    """Check that input columns are exactly the payload columns (technical ones optional).

    Args:
        columns: Names of the input columns.
        target: Where the rows go.

    Raises:
        SchemaError: A payload column is missing, or an input column is not in the schema.
    """
    names = set(columns)
    expected = set(target.value_schema.fields)
    missing = [name for name in target.value_schema.fields if name not in names]
    extra = [name for name in columns if name not in expected and name not in TECHNICAL_FIELD_NAMES]
    if missing:
        raise SchemaError(
            "input lacks columns of the value schema",
            topic=target.topic,
            table=target.table,
            columns=missing,
        )
    if extra:
        raise SchemaError(
            "input has columns the value schema does not know; add them to "
            "the schema or leave them out of the query",
            topic=target.topic,
            table=target.table,
            columns=extra,
        )


def row_table(row: dict[str, Any], schema: pa.Schema, target: Target, kind: str) -> pa.Table:
    """One row as an Arrow table of ``schema`` (missing fields null; constants fill some).

    Raises:
        SchemaError: The row names a column the schema does not have.
        EncodeError: A value does not convert to its column's Arrow type.
    """
    unknown = [name for name in row if name not in schema.names]
    if unknown:
        raise SchemaError(
            f"{kind} row has columns not in the {kind} schema",
            topic=target.topic,
            table=target.table,
            columns=unknown,
        )
    loose = pa.schema([field.with_nullable(True) for field in schema])
    try:
        return rows_to_arrow([row], loose, table=target.table)
    except EncodeError as exc:  # name the topic too: a table may feed several
        raise EncodeError(exc.message, **{"topic": target.topic, **exc.context}) from exc


_QUERY_WORDS = frozenset({"select", "with", "from", "values", "table", "pivot", "unpivot"})


def relation(con: duckdb.DuckDBPyConnection, table_or_query: str) -> duckdb.DuckDBPyRelation:
    """The relation of a table name, or of a query (``SELECT``/``WITH``/``FROM``/...)."""
    text = table_or_query.strip()
    first = text.split(None, 1)[0].lower() if text else ""
    if first in _QUERY_WORDS or text.startswith("("):
        return con.sql(text)
    return con.table(text)
