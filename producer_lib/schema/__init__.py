"""Avro schemas of change rows: types, value/key schemas, row types, encoding, framing.

Quickstart::

    from producer_lib.schema import (
        AvroDecimal, AvroLong, AvroNVarchar, KeySchema, RowType, ValueSchema,
        create_key_row, create_truncate_row,
    )

    schema = ValueSchema("SAMPLE_PLAN", "LABWARE")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("/BIC/NAME", AvroNVarchar(40), doc="plan name")  # encoded for Avro
    schema.add_field("PRICE", AvroDecimal(10, 2))
    schema.add_field("NOTE", AvroNVarchar(200, truncate=True))  # longer text cut, counted
    schema.pks = ["ID"]        # or add_primary_key("ID"); a set takes the column order
    schema.set_data_product_owner_email("owner@example.com")
    key_schema = KeySchema(schema)

    schema.to_avro_json()      # payload + technical fields + governance properties
    schema.get_pyarrow()       # Arrow schema with the original column names
    truncate = create_truncate_row(schema, None)
    key = create_key_row(truncate, key_schema)

No value is altered silently: text longer than its ``AvroVarchar``/``AvroNVarchar`` length
and finite floats beyond float32 are refused when encoded, naming table, column, row and key;
truncation is an opt-in (on the type, or ``ValueSchema.truncate_text``) and every cut value is
counted per column (``AvroEncoder.truncations``).

DuckDB ``DESCRIBE`` output becomes a schema with :func:`value_schema_from_describe`; the
package itself stays pure (no Kafka, Spark or DuckDB connections).
"""

from producer_lib.schema.duckdb_types import avro_type_from_duckdb, value_schema_from_describe
from producer_lib.schema.encoder import AvroEncoder
from producer_lib.schema.expectations import Expectation
from producer_lib.schema.framing import (
    Header,
    confluent_header,
    parse_header,
    schema_fingerprint,
    single_object_header,
)
from producer_lib.schema.names import decode_name, encode_name
from producer_lib.schema.row_types import RowType, create_key_row, create_truncate_row
from producer_lib.schema.types import (
    AvroArray,
    AvroBoolean,
    AvroByte,
    AvroBytes,
    AvroCLOB,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroField,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroNCLOB,
    AvroNVarchar,
    AvroRecord,
    AvroShort,
    AvroSTGeometry,
    AvroSTPoint,
    AvroString,
    AvroTimeMicros,
    AvroTimeMillis,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroType,
    AvroURI,
    AvroUUID,
    AvroVarchar,
    avro_type_from_json,
)
from producer_lib.schema.value_schema import (
    TECHNICAL_FIELDS,
    ForeignKey,
    KeySchema,
    ValueSchema,
)

__all__ = [
    "AvroArray",
    "AvroBoolean",
    "AvroByte",
    "AvroBytes",
    "AvroCLOB",
    "AvroDate",
    "AvroDecimal",
    "AvroDouble",
    "AvroEncoder",
    "AvroField",
    "AvroFloat",
    "AvroInt",
    "AvroLong",
    "AvroMap",
    "AvroNCLOB",
    "AvroNVarchar",
    "AvroRecord",
    "AvroSTGeometry",
    "AvroSTPoint",
    "AvroShort",
    "AvroString",
    "AvroTimeMicros",
    "AvroTimeMillis",
    "AvroTimestamp",
    "AvroTimestampMicros",
    "AvroType",
    "AvroURI",
    "AvroUUID",
    "AvroVarchar",
    "Expectation",
    "ForeignKey",
    "Header",
    "KeySchema",
    "RowType",
    "TECHNICAL_FIELDS",
    "ValueSchema",
    "avro_type_from_duckdb",
    "avro_type_from_json",
    "confluent_header",
    "create_key_row",
    "create_truncate_row",
    "decode_name",
    "encode_name",
    "parse_header",
    "schema_fingerprint",
    "single_object_header",
    "value_schema_from_describe",
]
