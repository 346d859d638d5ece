"""How a record's value is framed on the wire, and its Avro body decoded on the JVM.

A value starts with a header: ``0x00`` + 4-byte registry id (Confluent) or ``0xC3 0x01`` +
8-byte fingerprint (single object); the Avro body follows. These column expressions split and
decode it; the scan (:mod:`lakehouse_writer.read.scan`), the decode
(:mod:`lakehouse_writer.read.decode`), the key check (:mod:`lakehouse_writer.read.keys`) and the
reload share them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column

HEADER = "__header"
_CONFLUENT_LEN, _SINGLE_OBJECT_LEN = 5, 10


def header_column(column: str = "value") -> Column:
    """The header bytes of ``column`` (``0x00`` + id, or ``0xC3 0x01`` + fingerprint), else null.

    Bytes, not text: this runs for every row; :func:`header_tag` names the few distinct ones.
    Keys are framed like values (``column="key"``).
    """
    from pyspark.sql import functions as F

    framed = F.col(column)
    confluent = (F.substring(framed, 1, 1) == F.lit(b"\x00")) & (F.length(framed) >= _CONFLUENT_LEN)
    single = (F.substring(framed, 1, 2) == F.lit(b"\xc3\x01")) & (
        F.length(framed) >= _SINGLE_OBJECT_LEN
    )
    return F.when(confluent, F.substring(framed, 1, _CONFLUENT_LEN)).when(
        single, F.substring(framed, 1, _SINGLE_OBJECT_LEN)
    )


def header_array(values: pa.Array) -> pa.Array:
    """:func:`header_column` over an Arrow array of framed bytes (a batch read in the driver)."""
    import pyarrow.compute as pc

    size = pc.binary_length(values)
    confluent = pc.and_(
        pc.equal(pc.binary_slice(values, 0, 1), b"\x00"), pc.greater_equal(size, _CONFLUENT_LEN)
    )
    single = pc.and_(
        pc.equal(pc.binary_slice(values, 0, 2), b"\xc3\x01"),
        pc.greater_equal(size, _SINGLE_OBJECT_LEN),
    )
    return pc.case_when(
        pc.make_struct(confluent, single),
        pc.binary_slice(values, 0, _CONFLUENT_LEN),
        pc.binary_slice(values, 0, _SINGLE_OBJECT_LEN),
    )


def header_length(header: bytes | str) -> int:
    """The length of a header, given as its bytes or its :func:`header_tag`."""
    confluent = header.startswith("c:") if isinstance(header, str) else header[:1] == b"\x00"
    return _CONFLUENT_LEN if confluent else _SINGLE_OBJECT_LEN


def header_tag(header: bytes) -> str:
    """``c:<id>`` (Confluent) or ``f:<16 hex>`` (single object) of a header's bytes."""
    header = bytes(header)
    if header[:1] == b"\x00":
        return f"c:{int.from_bytes(header[1:5], 'big')}"
    return f"f:{header[2:10].hex()}"


def body_column(header_length: int, column: str = "value") -> Column:
    """The Avro body of ``column``: the bytes after its header of ``header_length`` bytes."""
    from pyspark.sql import functions as F

    skip = header_length
    return F.expr(f"substring({column}, {skip + 1}, length({column}) - {skip})")


def avro_struct(body: Column, schema_json: str) -> Column:
    """``from_avro(body, schema_json)`` in PERMISSIVE mode (null fields where bytes are bad).

    PySpark's ``from_avro`` passes its options as a ``CreateMap`` expression, which every
    copy of the expression evaluates through one shared, unsynchronized map builder: two
    threads planning queries over the same decoded rows at once (the tables of a batch,
    :mod:`lakehouse_writer.runtime.parallel`) failed with ``DUPLICATED_MAP_KEY``. Here the options
    are a map literal, evaluated without a builder. Where Spark's classes differ, PySpark's
    ``from_avro``.
    """
    from py4j.protocol import Py4JError
    from pyspark.sql import Column as PyColumn
    from pyspark.sql import SparkSession
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import MapType, StringType

    session = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    try:
        assert session is not None
        jvm: Any = session._jvm  # type: ignore[attr-defined]
        expressions, types = (
            jvm.org.apache.spark.sql.catalyst.expressions,
            jvm.org.apache.spark.sql.types,
        )
        options = expressions.Literal.create(
            jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(_AVRO_OPTIONS),
            types.DataType.fromJson(MapType(StringType(), StringType()).json()),
        )
        schema = expressions.Literal.create(schema_json, types.DataTypes.StringType)
        child = session._jsparkSession.expression(body._jc)  # type: ignore[attr-defined]
        node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(
            expressions.FromAvro(child, schema, options)
        )
        return PyColumn(jvm.org.apache.spark.sql.Column(node))  # type: ignore[call-arg]
    except (AssertionError, Py4JError, AttributeError):
        return from_avro(body, schema_json, dict(_AVRO_OPTIONS))


_AVRO_OPTIONS = {"mode": "PERMISSIVE"}  # a row that does not decode is rejected, not fatal
