"""Checking a table's expectations on the staged rows, in DuckDB, before they are produced.

One query counts the rows and, per expectation, the rows that fail it (``count(*) FILTER``
over one scan). Only when a ``drop`` expectation failed do the rows that go and the rows that
stay cost another query each: :attr:`ExpectationReport.kept_sql` is what the export reads,
:attr:`ExpectationReport.dropped_sql` the rows for ``_rejected_rows``, each with the names of
the expectations it failed (column ``__failed_expectations``). A predicate DuckDB refuses is
an error naming the flow, the table and the expectation. The rules are in
:mod:`producer_lib.schema.expectations`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from producer_lib.errors import SchemaError
from producer_lib.schema.expectations import Expectation, sql_literal
from producer_lib.staging.pk_check import source_sql

__all__ = [
    "FAILED_COLUMN",
    "ExpectationCount",
    "ExpectationReport",
    "check_expectations",
    "merge_reports",
]

FAILED_COLUMN = "__failed_expectations"  # list of names, in the rows dropped


@dataclass(frozen=True)
class ExpectationCount:
    """How many checked rows failed one expectation."""

    expectation: Expectation
    failed: int


@dataclass(frozen=True)
class ExpectationReport:
    """The expectations of one table checked on one export's rows.

    Attributes:
        table: ``<namespace>.<name>`` of the value schema.
        source: What was checked (a table name or a query), as given to the export.
        rows_checked: Rows of the source.
        counts: Per expectation, the rows that failed it.
    """

    table: str
    source: str
    rows_checked: int
    counts: tuple[ExpectationCount, ...] = field(default_factory=tuple)

    def failed(self, action: str) -> list[ExpectationCount]:
        """The expectations of ``action`` that some row failed."""
        return [c for c in self.counts if c.expectation.action == action and c.failed]

    @property
    def drops(self) -> list[Expectation]:
        """The ``drop`` expectations that some row failed."""
        return [c.expectation for c in self.failed("drop")]

    @property
    def kept_sql(self) -> str:
        """The query of the rows to produce: the source without the rows to drop."""
        if not self.drops:
            return self.source
        return f"SELECT * FROM {source_sql(self.source)} WHERE NOT ({_any_fails(self.drops)})"

    @property
    def dropped_sql(self) -> str:
        """The rows to drop, each with :data:`FAILED_COLUMN`: the drop expectations it failed."""
        names = ", ".join(
            f"CASE WHEN {e.failing} THEN {sql_literal(e.name)} END" for e in self.drops
        )
        return (
            f"SELECT *, list_filter([{names}], x -> x IS NOT NULL) AS {FAILED_COLUMN} "
            f"FROM {source_sql(self.source)} WHERE {_any_fails(self.drops)}"
        )

    def to_json(self) -> dict[str, Any]:
        """``{"rows_checked": n, "expectations": {name: {"action", "failed"}}}``."""
        return {
            "rows_checked": self.rows_checked,
            "expectations": {
                c.expectation.name: {"action": c.expectation.action, "failed": c.failed}
                for c in self.counts
            },
        }


def _any_fails(expectations: Sequence[Expectation]) -> str:
    return " OR ".join(e.failing for e in expectations)


def check_expectations(
    connection: duckdb.DuckDBPyConnection,
    table_or_query: str,
    expectations: Sequence[Expectation],
    *,
    table: str,
    flow: str,
) -> ExpectationReport:
    """Count the rows of ``table_or_query`` and the rows failing each expectation (one scan).

    Args:
        connection: The staging database.
        table_or_query: The export's source: a table name, or a query.
        expectations: The value schema's expectations.
        table: ``<namespace>.<name>``, for the report and errors.
        flow: The flow function, for errors.

    Raises:
        SchemaError: DuckDB refuses a predicate (names flow, table, expectation, its SQL
            and DuckDB's reason).
    """
    counts = ", ".join(f"count(*) FILTER (WHERE {e.failing})" for e in expectations)
    query = f"SELECT count(*){', ' + counts if counts else ''} FROM {source_sql(table_or_query)}"
    try:
        row = connection.execute(query).fetchone()
    except duckdb.Error as exc:
        raise _bad_predicate(connection, table_or_query, expectations, table, flow, exc) from exc
    assert row is not None  # an aggregate without GROUP BY has one row
    return ExpectationReport(
        table,
        table_or_query,
        int(row[0]),
        tuple(ExpectationCount(e, int(n)) for e, n in zip(expectations, row[1:], strict=True)),
    )


def _bad_predicate(
    connection: duckdb.DuckDBPyConnection,
    table_or_query: str,
    expectations: Sequence[Expectation],
    table: str,
    flow: str,
    exc: duckdb.Error,
) -> SchemaError:
    """The error naming the first expectation DuckDB refuses alone (or the source's error)."""
    source = source_sql(table_or_query)
    for expectation in expectations:
        try:
            connection.execute(
                f"SELECT count(*) FILTER (WHERE {expectation.failing}) FROM {source}"
            )
        except duckdb.Error as alone:
            return SchemaError(
                f"expectation {expectation.name!r} cannot be checked: {alone}",
                flow=flow,
                table=table,
                expectation=expectation.name,
                sql=expectation.sql,
            )
    return SchemaError(
        f"expectations cannot be checked: {exc}", flow=flow, table=table, source=table_or_query
    )


def merge_reports(
    into: dict[str, dict[str, Any]], reports: Sequence[ExpectationReport]
) -> dict[str, dict[str, Any]]:
    """Add ``reports`` to the per-table totals ``into`` (the run's), and return it.

    ``into`` maps a table to :meth:`ExpectationReport.to_json`'s shape; rows checked and
    failed rows add up over the exports of a run.
    """
    for report in reports:
        total = into.setdefault(report.table, {"rows_checked": 0, "expectations": {}})
        total["rows_checked"] += report.rows_checked
        found: Mapping[str, dict[str, Any]] = report.to_json()["expectations"]
        for name, count in found.items():
            entry = total["expectations"].setdefault(name, {"action": count["action"], "failed": 0})
            entry["failed"] += count["failed"]
    return into
