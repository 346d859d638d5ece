"""PostgreSQL catalog queries: primary key, foreign keys and comments of one table."""

from __future__ import annotations

from typing import Any

import psycopg

from producer_lib.errors import SourceError
from producer_lib.schema import ForeignKey
from producer_lib.sources.dictionary import DataDictionary

PRIMARY_KEY_SQL = """
SELECT a.attname FROM pg_constraint c
CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
WHERE c.conrelid = %(rel)s AND c.contype = 'p' ORDER BY k.ord"""

FOREIGN_KEYS_SQL = """
SELECT c.conname, a.attname, n.nspname, r.relname, ra.attname FROM pg_constraint c
CROSS JOIN LATERAL unnest(c.conkey, c.confkey) WITH ORDINALITY AS k(attnum, refnum, ord)
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
JOIN pg_attribute ra ON ra.attrelid = c.confrelid AND ra.attnum = k.refnum
JOIN pg_class r ON r.oid = c.confrelid JOIN pg_namespace n ON n.oid = r.relnamespace
WHERE c.conrelid = %(rel)s AND c.contype = 'f' ORDER BY c.conname, k.ord"""

COMMENTS_SQL = """
SELECT attname, col_description(attrelid, attnum) FROM pg_attribute
WHERE attrelid = %(rel)s AND attnum > 0 AND NOT attisdropped
AND col_description(attrelid, attnum) IS NOT NULL"""


async def _rows(pg: psycopg.AsyncConnection[Any], query: str, rel: int) -> list[tuple[Any, ...]]:
    async with pg.cursor() as cur:
        await cur.execute(query, {"rel": rel})  # type: ignore[arg-type]
        return await cur.fetchall()


def foreign_keys_from_rows(rows: list[tuple[Any, ...]]) -> tuple[ForeignKey, ...]:
    """Group ``(constraint, column, ref schema, ref table, ref column)`` rows into keys."""
    grouped: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    return tuple(
        ForeignKey(tuple(r[1] for r in group), group[0][2], group[0][3], tuple(r[4] for r in group))
        for group in grouped.values()
    )


async def read_dictionary(pg: psycopg.AsyncConnection[Any], table: str) -> DataDictionary:
    """Read the keys and comments of ``table`` (``schema.table`` as SQL spells it).

    Raises:
        SourceError: The table is not found (e.g. a view of another name, or no privilege).
    """
    async with pg.cursor() as cur:
        await cur.execute(
            "SELECT to_regclass(%s)::oid, obj_description(to_regclass(%s), 'pg_class')",
            [table, table],
        )
        found = await cur.fetchone()
    if not found or found[0] is None:
        raise SourceError("Table not found in the PostgreSQL catalog", table=table)
    rel, table_comment = int(found[0]), found[1]
    return DataDictionary(
        primary_key=tuple(r[0] for r in await _rows(pg, PRIMARY_KEY_SQL, rel)),
        foreign_keys=foreign_keys_from_rows(await _rows(pg, FOREIGN_KEYS_SQL, rel)),
        column_comments=dict(await _rows(pg, COMMENTS_SQL, rel)),  # type: ignore[arg-type]
        table_comment=table_comment,
    )
