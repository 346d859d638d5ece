"""Which writer schemas the writer decodes while it reads a batch (pure bookkeeping)."""

from __future__ import annotations

import json

from lakehouse_writer.catalog import CatalogEntry
from lakehouse_writer.scan import ExpectedSchemas
from tests.support.writer import sample_schema


def _entry(name: str) -> CatalogEntry:
    return CatalogEntry(json.dumps(sample_schema(name).to_avro_json()), "value", f"t_{name}")


def test_the_most_recently_seen_schemas_come_first_and_the_oldest_drop_out():
    expected = ExpectedSchemas(limit=2)
    assert not expected and expected.guess() == []
    for header, name in ((b"a", "A"), (b"b", "B"), (b"a", "A"), (b"c", "C")):
        expected.saw(header, _entry(name))
    assert [e.header for e in expected.guess()] == [b"c", b"a"]  # b was seen longest ago
    assert [e.schema.name for e in expected.guess()] == ["C", "A"]


def test_a_cold_start_takes_the_first_catalog_candidates_in_order():
    expected = ExpectedSchemas(limit=2)
    expected.seed([(b"x", _entry("X")), (b"y", _entry("Y")), (b"z", _entry("Z"))])
    assert [e.header for e in expected.guess()] == [b"x", b"y"]


def test_a_schema_that_is_not_a_value_schema_is_not_expected():
    expected = ExpectedSchemas()
    expected.saw(b"k", CatalogEntry('{"type": "string"}', "key", "t"))
    assert not expected
