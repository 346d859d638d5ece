"""One in-memory DuckDB for the process: where the driver runs the rules on a few rows.

The delta-rs engine holds a small table's rows in it (Arrow in temp tables), and Spark's
engine computes a small history MERGE's source in it (:mod:`lakehouse_writer.rules.history`,
DuckDB's dialect): the same rules' text as Spark's, without a Spark job per window.
"""

from __future__ import annotations

import threading

import duckdb

from producer_lib.staging.extensions import load_packaged_extension

__all__ = ["cursor"]

_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "threads": 1,  # tiny tables: one core
    # DuckDB 1.5.5's rewrite of ``row_number() ... = 1`` into an aggregate fails (INTERNAL
    # Error: "Attempted to access index 7 within vector of size 7") on the MERGE source of a
    # table with two key columns whose batch pairs BEFORE images; the rules' text is valid
    # SQL, and without the rewrite DuckDB runs it (tests/lakehouse_writer/test_rules_sql.py).
    "disabled_optimizers": "top_n_window_elimination",
}
_lock = threading.Lock()
_database: duckdb.DuckDBPyConnection | None = None


def cursor() -> duckdb.DuckDBPyConnection:
    """A connection of its own (temp tables are per connection) to the shared database.

    With time zones (ICU) in UTC: the change times are ``TIMESTAMPTZ``.
    """
    global _database
    with _lock:
        if _database is None:
            database = duckdb.connect(config=_CONFIG)
            load_packaged_extension(database, "icu")
            database.execute("SET TimeZone = 'UTC'")
            _database = database
        found = _database.cursor()
    found.execute("SET TimeZone = 'UTC'")
    return found
