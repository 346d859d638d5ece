"""Quoting for DuckDB SQL: what goes in comes back out of DuckDB unchanged."""

from __future__ import annotations

import duckdb
import pytest

from producer_lib.sql_text import quote_ident, quote_literal

AWKWARD = ["plain", "it's", 'say "hi"', "'; DROP TABLE t; --", "", "ünïcode ✓", "a\nb"]


@pytest.mark.parametrize("text", AWKWARD)
def test_a_quoted_literal_reads_back_as_the_same_string(text):
    assert duckdb.sql(f"SELECT {quote_literal(text)}").fetchone() == (text,)


@pytest.mark.parametrize("name", [n for n in AWKWARD if n])
def test_a_quoted_identifier_names_the_same_column(name):
    relation = duckdb.sql(f"SELECT 1 AS {quote_ident(name)}")
    assert relation.columns == [name]
