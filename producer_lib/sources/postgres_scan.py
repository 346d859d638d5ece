"""The fast copy of PostgresReader: the query pushed down through DuckDB's postgres_scanner.

DuckDB attaches the database (``ATTACH … (TYPE postgres, READ_ONLY)``, the extension loaded
offline from the ``duckdb-extension-postgres_scanner`` package) and runs the reader's query
on the server with ``postgres_query``: PostgreSQL streams it as binary ``COPY`` and DuckDB
decodes it in C++ straight into the staging table, no Python object per value.

The reader's own type mapping (from psycopg's description of the result) stays the contract;
this module only makes the scanner deliver exactly those values. The query is wrapped as
``SELECT c0, c1::text, … FROM (<query>) AS q(c0, c1, …)`` (positional names: any column name
or duplicate is safe), with a cast on the server where the scanner would change a value:

* ``numeric`` without precision: the scanner reads it as DOUBLE; sent as text and checked
  here (more than 28 digits before or 10 after the point, NaN or Infinity fail the load,
  naming the column) before becoming DECIMAL(38,10);
* ``json``, ``jsonb``, ``xml``, ``inet``, ``cidr``, ``macaddr``, ``name``: PostgreSQL's text;
* ``oid``: ``int8``.

and, on the DuckDB side, ``timestamp`` (no zone) read as UTC and ``char(n)`` padded to ``n``
as PostgreSQL prints it (the scanner trims it). Arrays get the same rules per element.

A whole table (``SELECT *`` or plain columns ``FROM`` one ordinary table, nothing else) whose
columns all come through the scanner unchanged is read as the scanner reads an attached
table instead: ranges of ``ctid`` copied in parallel on several connections sharing one
exported snapshot, as fast as DuckDB's own ``CREATE TABLE … AS SELECT * FROM pg.s.t``.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import sqlglot
from psycopg.conninfo import conninfo_to_dict
from sqlglot import exp

from producer_lib.errors import SourceError
from producer_lib.schema import AvroType
from producer_lib.sources.dictionary import SourceTable
from producer_lib.sql_text import quote_ident, quote_literal
from producer_lib.staging import load_packaged_extension, quote_table

EXTENSION = "postgres_scanner"
_SENT_AS_TEXT = frozenset({"json", "jsonb", "xml", "inet", "cidr", "macaddr", "name"})
# PostgreSQL prints numeric as plain digits: at most 28 before and 10 (plus zeros) after.
_FITS_DECIMAL_38_10 = r"-?[0-9]{1,28}(\.[0-9]{0,10}0*)?"
_databases = itertools.count()
# Types the scanner's table scan stages exactly as the reader maps them (after _duckdb_side).
_TABLE_SCAN_TYPES = frozenset(
    {
        "bool",
        "int2",
        "int4",
        "int8",
        "float4",
        "float8",
        "numeric",
        "varchar",
        "bpchar",
        "text",
        "bytea",
        "date",
        "time",
        "timestamp",
        "timestamptz",
        "uuid",
    }
)
# Run on another connection of the same user: stops the tagged copy (pg_signal_backend rules).
CANCEL_SQL = """SELECT pg_cancel_backend(pid) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND strpos(query, %s) > 0"""


@dataclass(frozen=True)
class PgColumn:
    """One result column as the reader mapped it.

    Attributes:
        name: The column's name in the result (and in the staging table).
        type_name: ``pg_type.typname``; of the element for an array.
        is_array: A one-dimensional array of ``type_name``.
        avro_type: The Avro type the reader chose.
        length: ``n`` of ``char(n)``; None otherwise.
        unbounded_numeric: ``numeric`` without precision (staged as DECIMAL(38,10)).
    """

    name: str
    type_name: str
    is_array: bool
    avro_type: AvroType
    length: int | None = None
    unbounded_numeric: bool = False


def whole_table_of(sql: str) -> SourceTable | None:
    """The table of ``SELECT * | plain columns FROM table`` (nothing else), else None."""
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Select) or {k for k, v in tree.args.items() if v} != {
        "expressions",
        "from_",
    }:
        return None
    table = tree.args["from_"].this
    if not isinstance(table, exp.Table) or {k for k, v in table.args.items() if v} - {"this", "db"}:
        return None
    if not all(_plain_column(item) for item in tree.expressions):
        return None
    schema = table.args.get("db")
    return SourceTable(
        schema.name if schema else None,
        table.name,
        bool(schema and schema.quoted),
        bool(table.this.quoted),
    )


def _plain_column(item: exp.Expression) -> bool:
    if isinstance(item, exp.Star):
        return True
    return isinstance(item, exp.Column) and {k for k, v in item.args.items() if v} == {"this"}


def table_scan_fits(columns: list[PgColumn]) -> bool:
    """True when the scanner's table scan stages every column exactly (no server cast)."""
    return all(
        c.type_name in _TABLE_SCAN_TYPES and not c.is_array and not c.unbounded_numeric
        for c in columns
    )


def pushdown_sql(sql: str, columns: list[PgColumn], tag: str = "") -> str:
    """The query PostgreSQL runs: ``sql`` with positional column names and server casts.

    ``tag`` goes into a leading comment, which ``pg_stat_activity`` shows (see CANCEL_SQL).
    """
    names = [f"c{index}" for index in range(len(columns))]
    wire = ", ".join(
        _server_side(name, column) for name, column in zip(names, columns, strict=True)
    )
    comment = f"/* {tag} */ " if tag else ""
    return f"{comment}SELECT {wire} FROM ({sql}) AS q({', '.join(names)})"


def _server_side(name: str, column: PgColumn) -> str:
    suffix = "[]" if column.is_array else ""
    if column.unbounded_numeric or column.type_name in _SENT_AS_TEXT:
        return f"{name}::text{suffix}"
    if column.type_name == "oid":
        return f"{name}::int8{suffix}"
    return name


def staging_select(columns: list[PgColumn], source: str) -> str:
    """DuckDB's ``SELECT`` from the scanner's ``source`` into the staging table's columns."""
    items = [f"{_duckdb_side(f'c{i}', c)} AS {quote_ident(c.name)}" for i, c in enumerate(columns)]
    return f"SELECT {', '.join(items)} FROM {source}"


def _duckdb_side(name: str, column: PgColumn) -> str:
    if not column.is_array:
        return _value(name, column)
    element = _value("x", column)
    return name if element == "x" else f"list_transform({name}, x -> {element})"


def _value(name: str, column: PgColumn) -> str:
    if column.type_name == "timestamp":
        return f"timezone('UTC', {name})"  # no zone: UTC, whatever DuckDB's TimeZone says
    if column.type_name == "bpchar" and column.length:
        return f"rpad({name}, {column.length}, ' ')"
    if column.unbounded_numeric:
        message = quote_literal(
            f"{_MARK}{column.name}{_MARK} numeric value does not fit "
            "DECIMAL(38,10): cast the column in SQL"
        )
        return (
            f"CASE WHEN {name} IS NULL THEN NULL WHEN regexp_full_match({name}, "
            f"'{_FITS_DECIMAL_38_10}') THEN {name}::DECIMAL(38,10) "
            f"ELSE error({message}) END"
        )
    return name


_MARK = "\u241f"  # brackets the column name in a value error, so the SourceError can name it
_MARKED = re.compile(f"{_MARK}(.*?){_MARK}", re.DOTALL)


class PostgresScan:
    """One PostgreSQL database attached to a DuckDB connection, read with ``postgres_query``.

    Args:
        connection: The DuckDB staging database.
        dsn: libpq connection string or URL of the PostgreSQL database.
    """

    def __init__(self, connection: duckdb.DuckDBPyConnection, dsn: str) -> None:
        self.connection = connection
        self.dsn = dsn
        self.database: str | None = None

    def attach(self) -> None:
        """Load the extension offline and attach the database (once).

        Raises:
            SourceError: The extension package is missing, or the database cannot be attached
                (the message never shows the DSN's password).
        """
        if self.database is not None:
            return
        load_packaged_extension(self.connection, EXTENSION)
        database = f"__postgres_{next(_databases)}"
        try:
            self.connection.execute(
                f"ATTACH {quote_literal(self.dsn)} AS {quote_ident(database)} "
                "(TYPE postgres, READ_ONLY)"
            )
        except duckdb.Error as exc:
            raise SourceError(f"DuckDB cannot attach PostgreSQL: {self.redact(str(exc))}") from None
        self.database = database

    def detach(self) -> None:
        """Detach the database, if attached."""
        if self.database is not None:
            self.connection.execute(f"DETACH DATABASE IF EXISTS {quote_ident(self.database)}")
            self.database = None

    def copy(
        self,
        duckdb_table: str,
        sql: str,
        columns: list[PgColumn],
        table: tuple[str, str] | None = None,
        tag: str = "",
    ) -> None:
        """Insert the rows of ``sql`` into ``duckdb_table`` (created by the reader).

        ``tag`` marks the query on the server, so that :data:`CANCEL_SQL` can stop it: the
        scanner does not heed DuckDB's ``interrupt()`` while rows stream. ``table``
        (schema, name): ``sql`` reads that whole table (:func:`whole_table_of`,
        :func:`table_scan_fits`), scanned in parallel instead (stopped by ``interrupt()``).

        Raises:
            SourceError: PostgreSQL or DuckDB failed; names the table, and the column when a
                value does not fit it.
        """
        self.attach()
        database = self.database or ""
        if table is None:
            query = pushdown_sql(sql, columns, tag)
            source, parameters = f"postgres_query({quote_literal(database)}, ?)", [query]
        else:
            database = quote_ident(database)
            names = ", ".join(f"{quote_ident(c.name)} AS c{i}" for i, c in enumerate(columns))
            source, parameters = (
                f"(SELECT {names} FROM {database}.{quote_ident(table[0])}.{quote_ident(table[1])})",
                [],
            )
        insert = (
            f"INSERT INTO {quote_table(duckdb_table)} BY NAME {staging_select(columns, source)}"
        )
        try:
            with self._any_order(table is not None):
                self.connection.execute(insert, parameters)
        except duckdb.Error as exc:
            raise self._copy_error(exc, duckdb_table, sql, columns) from None

    @contextlib.contextmanager
    def _any_order(self, whole_table: bool) -> Iterator[None]:
        """Let a whole-table scan insert its ranges as they come (``preserve_insertion_order``).

        ``SELECT … FROM t`` without ``ORDER BY`` has no order to keep; keeping the ranges' order
        costs a third of the copy. A query keeps its order (one stream, maybe ``ORDER BY``).
        """
        if not whole_table:
            yield
            return
        row = self.connection.execute("SELECT current_setting('preserve_insertion_order')")
        previous = bool(row.fetchone()[0])  # type: ignore[index]
        self.connection.execute("SET preserve_insertion_order = false")
        try:
            yield
        finally:
            self.connection.execute(f"SET preserve_insertion_order = {previous}")

    def _copy_error(
        self, exc: duckdb.Error, table: str, sql: str, columns: list[PgColumn]
    ) -> SourceError:
        text = self.redact(str(exc))
        marked = _MARKED.search(text)
        if marked:
            return SourceError(
                f"Value does not fit its column: {_MARKED.sub('', text)}",
                table=table,
                column=marked.group(1),
                sql=sql,
            )
        arrays = [column.name for column in columns if column.is_array]
        if arrays and "dimensions" in text:
            text += f" (array columns: {', '.join(arrays)}: cast a multi-dimensional one to text)"
        return SourceError(f"Reading from PostgreSQL failed: {text}", table=table, sql=sql)

    def redact(self, text: str) -> str:
        """``text`` without the DSN or its password."""
        secrets = [self.dsn]
        try:
            password = conninfo_to_dict(self.dsn).get("password")
        except Exception:  # a DSN libpq cannot parse has no password to find
            password = None
        if password:
            secrets.append(str(password))
        for secret in secrets:
            text = text.replace(secret, "***")
        return text
