"""Decode what a flow published: Avro values of a topic, schemas taken from ``_flow_schemas``."""

from __future__ import annotations

import io
import json

import fastavro

from tests.support.consume import consume_all


def decoded_values(bootstrap: str, topic: str) -> list[dict]:
    """Every committed value of ``topic`` as a dict (single-object framing, ``_flow_schemas``)."""
    schemas = {}
    for message in consume_all(bootstrap, "_flow_schemas"):
        record = json.loads(message.value())
        schemas[record["fingerprint"]] = fastavro.parse_schema(record["schema"])
    values = []
    for message in consume_all(bootstrap, topic):
        raw = message.value()
        assert raw[:2] == b"\xc3\x01", f"not single-object framed: {raw[:10]!r}"
        schema = schemas[raw[2:10].hex()]  # the key of `_flow_schemas` is the header's fingerprint
        values.append(fastavro.schemaless_reader(io.BytesIO(raw[10:]), schema, None))
    return values
