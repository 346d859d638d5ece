"""DuckDB staging: the database readers load into and the producer reads from.

Quickstart::

    import duckdb
    from producer_lib.staging import check_primary_key, create_table, describe

    conn = duckdb.default_connection()          # shared by readers, flow SQL and producer
    schema = describe(conn, "select 1::BIGINT as ID", "T", "DEMO")
    create_table(conn, "T", schema.get_pyarrow(technical=False))
    schema.add_primary_key("ID")
    check_primary_key("T", schema, conn)        # SourceError on duplicate or null keys

Delta tables and other extensions load offline from their PyPI packages
(:func:`load_packaged_extension`); ``delta_scan(delta_scan_location(path))`` reads a local
table of any name (:func:`delta_scan_location`).
"""

from producer_lib.staging.duckdb_stage import (
    append_arrow,
    connection_lock,
    create_table,
    default_connection,
    describe,
    quote_ident,
    quote_table,
    row_count,
    table_arrow_schema,
)
from producer_lib.staging.extensions import (
    delta_scan_location,
    load_packaged_extension,
    packaged_extension_path,
)
from producer_lib.staging.pk_check import check_primary_key

__all__ = [
    "append_arrow",
    "check_primary_key",
    "connection_lock",
    "create_table",
    "default_connection",
    "delta_scan_location",
    "describe",
    "load_packaged_extension",
    "packaged_extension_path",
    "quote_ident",
    "quote_table",
    "row_count",
    "table_arrow_schema",
]
