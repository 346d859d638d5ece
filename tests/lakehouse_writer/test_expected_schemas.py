"""Which writer schemas the writer decodes while it reads a batch (pure bookkeeping)."""

from __future__ import annotations

import json

from lakehouse_writer.read.catalog import CatalogEntry
from lakehouse_writer.read.scan import Expected, ExpectedSchemas
from lakehouse_writer.route.ahead import sole_schemas
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


def test_only_a_table_s_sole_writer_schema_has_its_table_made_ahead():
    def expected(header: bytes, name: str, topic: str) -> Expected:
        entry = CatalogEntry(json.dumps(sample_schema(name).to_avro_json()), "value", topic)
        return Expected(header, entry, sample_schema(name))

    candidates = [
        expected(b"a", "A", "t_a"),  # its topic's only schema
        expected(b"b", "B", "t_b"),  # its topic had an older schema: rows may be of that one
        expected(b"c1", "C", "t_c1"),
        expected(b"c2", "C", "t_c2"),  # one table, two topics
    ]
    counts = {"t_a": 1, "t_b": 2, "t_c1": 1, "t_c2": 1}
    assert sole_schemas(candidates, counts) == {b"a"}
    assert sole_schemas(candidates, {}) == set()  # not in the catalog: not made ahead
