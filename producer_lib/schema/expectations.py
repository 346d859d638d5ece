"""Expectations: rules a table's rows must meet, each a SQL predicate with an action.

Declared on the value schema and kept in its JSON (the record property ``expectations``), so
whoever reads the schema sees them; the producer checks them in DuckDB before it produces
(:mod:`producer_lib.kafka.expectations`), the writer does not enforce them::

    schema.expect('"AMOUNT" >= 0', name="amount_positive", action="drop")
    schema.expect_column("EMAIL", not_null=True, matches=r"^[^@]+@[^@]+$", action="warn")
    schema.expect_column("STATUS", in_set=["open", "closed"])            # action: fail
    schema.expect_column("QTY", between=(1, 1000), name="qty_range")

A row *fails* an expectation when its predicate is ``FALSE``; ``NULL`` passes, as in a SQL
``CHECK`` constraint (ask for ``not_null=True`` where null is a failure). Actions:

- ``warn``: the row is produced; the failures are counted and logged;
- ``drop``: the row is not produced; it goes to the ``_rejected_rows`` topic with the names of
  the expectations it failed (the writer lands it in ``_rejected``);
- ``fail``: one failing row fails the export before anything of it is produced.

Predicates are DuckDB SQL over the staged rows' columns (their original names, double-quoted
where they need it). Nothing here runs SQL: the schema core stays free of engines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, get_args

from producer_lib.errors import SchemaError
from producer_lib.sql_text import quote_literal

__all__ = [
    "ACTIONS",
    "Action",
    "Expectation",
    "ExpectationsMixin",
    "column_predicate",
    "sql_identifier",
    "sql_literal",
]

Action = Literal["warn", "drop", "fail"]
ACTIONS: tuple[str, ...] = get_args(Action)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # a metric label and a header value as is


@dataclass(frozen=True)
class Expectation:
    """One rule: rows meet ``sql``, or ``action`` is taken.

    Attributes:
        name: Unique within the table; letters, digits, ``_`` (it names the rule in
            ``_execution_log``, the metrics and the rejected rows).
        sql: A DuckDB boolean expression over one row's columns.
        action: ``warn``, ``drop`` or ``fail``.
        column: The column a column expectation is about (None for a row expectation).
    """

    name: str
    sql: str
    action: Action = "fail"
    column: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise SchemaError(
                "An expectation's name is 1-128 letters, digits or '_', not starting with a digit",
                expectation=self.name,
            )
        if self.action not in ACTIONS:
            raise SchemaError(
                f"An expectation's action is one of {', '.join(ACTIONS)}",
                expectation=self.name,
                action=self.action,
            )
        if not isinstance(self.sql, str) or not self.sql.strip() or ";" in self.sql:
            raise SchemaError(
                "An expectation's SQL is one boolean expression (no ';')",
                expectation=self.name,
                sql=self.sql,
            )

    @property
    def failing(self) -> str:
        """SQL that is true for a row failing this expectation (FALSE fails, NULL passes)."""
        return f"(({self.sql}) IS FALSE)"

    def to_json(self) -> dict[str, Any]:
        """The expectation as it travels in the schema JSON."""
        data: dict[str, Any] = {"name": self.name, "sql": self.sql, "action": self.action}
        if self.column is not None:
            data["column"] = self.column
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Expectation:
        """Rebuild an expectation from :meth:`to_json`.

        Raises:
            SchemaError: Not an expectation.
        """
        try:
            return cls(
                str(data["name"]), data["sql"], data.get("action", "fail"), data.get("column")
            )
        except (KeyError, TypeError) as exc:
            raise SchemaError("Not an expectation", expectation=str(data)[:200]) from exc


def sql_identifier(name: str) -> str:
    """``name`` as a DuckDB identifier, always double-quoted (any column name works)."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(value: Any) -> str:
    """A Python value as a DuckDB literal: text, numbers, booleans, dates, times, timestamps.

    Raises:
        SchemaError: A value of another type.
    """
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quote_literal(value)
    if isinstance(value, datetime):
        kind = "TIMESTAMPTZ" if value.tzinfo is not None else "TIMESTAMP"
        return f"{kind} '{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, time):
        return f"TIME '{value.isoformat()}'"
    raise SchemaError("No SQL literal for this value", value=repr(value)[:100])


def column_predicate(
    column: str,
    *,
    not_null: bool = False,
    in_set: Iterable[Any] | None = None,
    between: Sequence[Any] | None = None,
    matches: str | None = None,
) -> tuple[str, str]:
    """The SQL predicate of column checks (ANDed) and a name that says which they are.

    Args:
        column: The column (original name).
        not_null: The column is never null.
        in_set: The value is one of these.
        between: ``(low, high)``: low <= value <= high; either may be None (unbounded).
        matches: A regular expression the whole text value matches (DuckDB
            ``regexp_full_match``).

    Raises:
        SchemaError: No check asked for, or one of the wrong shape.
    """
    ident = sql_identifier(column)
    parts: list[tuple[str, str]] = []
    if not_null:
        parts.append(("not_null", f"{ident} IS NOT NULL"))
    if in_set is not None:
        values = list(in_set)
        if not values:
            raise SchemaError("in_set needs at least one value", column=column)
        parts.append(("in_set", f"{ident} IN ({', '.join(sql_literal(v) for v in values)})"))
    if between is not None:
        parts.append(("between", _between(ident, column, between)))
    if matches is not None:
        parts.append(("matches", f"regexp_full_match({ident}, {sql_literal(matches)})"))
    if not parts:
        raise SchemaError(
            "expect_column needs a check: not_null, in_set, between or matches", column=column
        )
    return " AND ".join(sql for _, sql in parts), "_".join(kind for kind, _ in parts)


def _between(ident: str, column: str, bounds: Sequence[Any]) -> str:
    if len(bounds) != 2 or (bounds[0] is None and bounds[1] is None):
        raise SchemaError("between is (low, high); one of them may be None", column=column)
    low, high = bounds
    checks = [f"{ident} >= {sql_literal(low)}"] if low is not None else []
    checks += [f"{ident} <= {sql_literal(high)}"] if high is not None else []
    return " AND ".join(checks)


class ExpectationsMixin:
    """``expect``/``expect_column`` of :class:`~producer_lib.schema.ValueSchema`."""

    name: str
    _expectations: dict[str, Expectation]

    if TYPE_CHECKING:

        def field(self, name: str) -> Any:  # noqa: D102 - provided by ValueSchema
            ...

    @property
    def expectations(self) -> tuple[Expectation, ...]:
        """The table's expectations, in the order declared."""
        return tuple(self._expectations.values())

    def expect(self, sql: str, *, name: str, action: Action = "fail") -> Expectation:
        """Declare that every row meets ``sql`` (a DuckDB boolean expression over its columns).

        Args:
            sql: E.g. ``'"AMOUNT" >= 0'`` or ``'"SHIPPED_AT" >= "ORDERED_AT"'``.
            name: The rule's name (letters, digits, ``_``), unique within the table.
            action: ``warn``, ``drop`` or ``fail`` (see the module).

        Returns:
            The expectation.

        Raises:
            SchemaError: A bad name, action or SQL text, or the name is taken.
        """
        return self._add(Expectation(name, sql, action))

    def expect_column(
        self,
        column: str,
        *,
        not_null: bool = False,
        in_set: Iterable[Any] | None = None,
        between: Sequence[Any] | None = None,
        matches: str | None = None,
        action: Action = "fail",
        name: str | None = None,
    ) -> Expectation:
        """Declare checks of one column, compiled to one SQL predicate (the checks ANDed).

        Args:
            column: The column (original name); it must be in the schema.
            not_null: Never null.
            in_set: One of these values.
            between: ``(low, high)``, inclusive; None for an open end.
            matches: A regular expression the whole value matches.
            action: ``warn``, ``drop`` or ``fail``.
            name: The rule's name; default ``<column>_<checks>`` (``EMAIL_not_null_matches``),
                with characters a name cannot hold replaced by ``_``.

        Returns:
            The expectation.

        Raises:
            SchemaError: No such column, no check, a check of the wrong shape, or the name is
                taken.
        """
        self.field(column)
        sql, kinds = column_predicate(
            column, not_null=not_null, in_set=in_set, between=between, matches=matches
        )
        default = re.sub(r"\W", "_", f"{column}_{kinds}", flags=re.ASCII).lstrip("0123456789")
        return self._add(Expectation(name or default, sql, action, column))

    def _add(self, expectation: Expectation) -> Expectation:
        if expectation.name in self._expectations:
            raise SchemaError(
                "Another expectation of this table has the name",
                table=self.name,
                expectation=expectation.name,
            )
        self._expectations[expectation.name] = expectation
        return expectation

    def _restore_expectations(self, raw: Any) -> None:
        if not isinstance(raw, list):
            raise SchemaError("expectations must be a list", table=self.name)
        for item in raw:
            self._add(Expectation.from_json(item))
