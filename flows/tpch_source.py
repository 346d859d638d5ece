"""A TPC-H "source system" in a DuckDB file, with change tracking, for the ``tpch`` flow.

:func:`create_source` generates the eight TPC-H tables with DuckDB's dbgen and adds what a
real OLTP source offers a delta load: a ``change_log`` (``seq``, ``tbl``, ``k1``, ``k2``,
``op`` in I/U/D; think of a CDC or audit table) and tombstone tables ``deleted_orders`` /
``deleted_lineitem`` holding the last image of each deleted row. :func:`apply_changes`
plays a day of business: updates orders and their line items, adds new orders with line
items, deletes orders with their line items, logging every change.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import duckdb

from producer_lib.staging import load_packaged_extension

__all__ = ["ChangeSummary", "apply_changes", "create_source"]

TABLES: dict[str, tuple[str, ...]] = {  # table -> primary key, per the TPC-H specification
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "supplier": ("s_suppkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}


@dataclass(frozen=True)
class ChangeSummary:
    """What :func:`apply_changes` did, in orders and line items."""

    orders_updated: int
    orders_added: int
    orders_deleted: int
    lineitems_changed: int


def create_source(path: str | Path, scale_factor: float = 0.01) -> None:
    """(Re)create the source database at ``path`` with TPC-H data at ``scale_factor``.

    Below 0.01, dbgen repeats some partsupp keys (the flow's key check refuses them).
    """
    Path(path).unlink(missing_ok=True)
    with duckdb.connect(str(path)) as con:
        load_packaged_extension(con, "tpch")
        con.execute(f"CALL dbgen(sf={float(scale_factor)})")
        con.execute(
            "CREATE TABLE change_log (seq BIGINT, tbl VARCHAR, k1 BIGINT, k2 BIGINT, op VARCHAR)"
        )
        for table in ("orders", "lineitem"):
            con.execute(
                f"CREATE TABLE deleted_{table} AS SELECT *, 0::BIGINT AS seq FROM {table} LIMIT 0"
            )


def apply_changes(
    path: str | Path, *, seed: int = 7, updated: int = 50, added: int = 20, deleted: int = 10
) -> ChangeSummary:
    """Update, add and delete orders (with their line items) in the source, logging each."""
    rng = random.Random(seed)
    with duckdb.connect(str(path)) as con:
        keys = [k for (k,) in con.execute("SELECT o_orderkey FROM orders ORDER BY 1").fetchall()]
        picked = rng.sample(keys, updated + deleted)
        to_update, to_delete = picked[:updated], picked[updated:]
        con.execute("BEGIN")
        seq = con.execute("SELECT coalesce(max(seq), 0) FROM change_log").fetchone()[0]
        lines = _update(con, to_update, seq + 1)
        lines += _add(con, rng.sample(keys, added), max(keys), seq + 2)
        lines += _delete(con, to_delete, seq + 3)
        con.execute("COMMIT")
    return ChangeSummary(updated, added, deleted, lines)


def _in_list(keys: list[int]) -> str:
    return ", ".join(str(int(k)) for k in keys)


def _update(con: duckdb.DuckDBPyConnection, keys: list[int], seq: int) -> int:
    where = f"IN ({_in_list(keys)})"
    con.execute(
        f"UPDATE orders SET o_totalprice = o_totalprice + 1, o_orderstatus = 'F', "
        f"o_comment = 'revised' WHERE o_orderkey {where}"
    )
    con.execute(
        f"UPDATE lineitem SET l_quantity = l_quantity + 1, l_comment = 'revised' "
        f"WHERE l_orderkey {where}"
    )
    return _log(con, seq, "U", where)


def _add(con: duckdb.DuckDBPyConnection, templates: list[int], top: int, seq: int) -> int:
    """New orders copied from ``templates`` under fresh keys above ``top``, with line items."""
    new = [(template, top + 1 + i) for i, template in enumerate(templates)]
    mapping = ", ".join(f"({old}, {key})" for old, key in new)
    con.execute(
        f"CREATE TEMP TABLE new_keys(old BIGINT, new BIGINT); INSERT INTO new_keys VALUES {mapping}"
    )
    con.execute(
        "INSERT INTO orders SELECT o.* REPLACE (n.new AS o_orderkey, "
        "'new order' AS o_comment) FROM orders o JOIN new_keys n ON o.o_orderkey = n.old"
    )
    con.execute(
        "INSERT INTO lineitem SELECT l.* REPLACE (n.new AS l_orderkey) "
        "FROM lineitem l JOIN new_keys n ON l.l_orderkey = n.old"
    )
    con.execute("DROP TABLE new_keys")
    return _log(con, seq, "I", f"IN ({_in_list([key for _, key in new])})")


def _delete(con: duckdb.DuckDBPyConnection, keys: list[int], seq: int) -> int:
    where = f"IN ({_in_list(keys)})"
    lines = _log(con, seq, "D", where)
    con.execute(f"INSERT INTO deleted_orders SELECT *, {seq} FROM orders WHERE o_orderkey {where}")
    con.execute(
        f"INSERT INTO deleted_lineitem SELECT *, {seq} FROM lineitem WHERE l_orderkey {where}"
    )
    con.execute(f"DELETE FROM lineitem WHERE l_orderkey {where}")
    con.execute(f"DELETE FROM orders WHERE o_orderkey {where}")
    return lines


def _log(con: duckdb.DuckDBPyConnection, seq: int, op: str, where: str) -> int:
    """Log the orders and line items of ``where`` (order keys) as ``op``; return line items."""
    con.execute(
        f"INSERT INTO change_log SELECT {seq}, 'orders', o_orderkey, NULL, '{op}' "
        f"FROM orders WHERE o_orderkey {where}"
    )
    con.execute(
        f"INSERT INTO change_log SELECT {seq}, 'lineitem', l_orderkey, l_linenumber, "
        f"'{op}' FROM lineitem WHERE l_orderkey {where}"
    )
    return con.execute(f"SELECT count(*) FROM lineitem WHERE l_orderkey {where}").fetchone()[0]
