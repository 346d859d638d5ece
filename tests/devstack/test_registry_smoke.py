"""The devstack schema registry speaks the Confluent REST API and keeps our schema properties."""

from __future__ import annotations

import json
import urllib.request
import uuid

import fastavro
import pytest

pytestmark = pytest.mark.slow  # starts the Apicurio registry (a JVM)

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _call(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": _CONTENT_TYPE})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def test_register_and_fetch_by_id_keeps_custom_properties(schema_registry_url):
    schema = {
        "type": "record",
        "name": "ORDERS",
        "namespace": "TPCH",
        "primaryKeys": ["O_ORDERKEY"],
        "fields": [
            {"name": "O_ORDERKEY", "type": "long"},
            {"name": "_x_REVENUE_24_", "type": "double", "sourceName": "REVENUE$"},
        ],
    }
    subject = f"t_{uuid.uuid4().hex[:8]}-value"

    registered = _call(
        f"{schema_registry_url}/subjects/{subject}/versions", {"schema": json.dumps(schema)}
    )
    fetched = json.loads(_call(f"{schema_registry_url}/schemas/ids/{registered['id']}")["schema"])
    again = _call(
        f"{schema_registry_url}/subjects/{subject}/versions", {"schema": json.dumps(schema)}
    )

    assert fetched["primaryKeys"] == ["O_ORDERKEY"]
    assert fetched["fields"][1]["sourceName"] == "REVENUE$"
    assert fastavro.parse_schema(fetched)  # still a valid Avro schema
    assert again["id"] == registered["id"], "re-registering the same schema must reuse its id"
