"""SQL text for DuckDB: quoted identifiers and string literals.

A leaf module (it imports nothing of the library), so every layer can quote: the schema's
expectations, the staging of a source, the readers of Postgres, JSON events and Azure storage.
"""

from __future__ import annotations


def quote_ident(name: str) -> str:
    """Quote an identifier for DuckDB SQL: ``a"b`` -> ``"a""b"``."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """Quote a string literal for DuckDB SQL: ``it's`` -> ``'it''s'``."""
    return "'" + text.replace("'", "''") + "'"
