"""The shape a table asks for in the lakehouse: its clustering columns, and its history.

Mixed into :class:`~producer_lib.schema.value_schema.ValueSchema`; they travel as the
record-level properties ``clusterBy`` and ``history`` of the schema JSON.

- The lakehouse writer creates the table with Delta liquid clustering on the clustering
  columns, and changes the clustering of an existing table when they change (docs/TABLES.md,
  "Layout").
- A table with ``history`` ``"scd2"`` keeps every version of a key, each with the change times
  it was valid from and to and whether it is the current one (docs/OPERATIONS.md, "History
  tables"). A table is created with its history or without it, for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from producer_lib.errors import SchemaError

__all__ = ["HISTORY_KINDS", "MAX_CLUSTER_COLUMNS", "LayoutMixin"]

HISTORY_KINDS = ("scd2",)  # the histories a table may keep (slowly changing dimension type 2)

MAX_CLUSTER_COLUMNS = 4  # Delta liquid clustering takes at most four columns
_UNCLUSTERABLE = ("array", "map", "record")  # no min/max statistics to cluster by


class LayoutMixin:
    """Clustering columns and history.

    Needs ``name``, ``_fields``, ``_cluster_by``, ``_history`` and ``_check_columns``.
    """

    name: str
    _fields: Mapping[str, Any]
    _cluster_by: list[str]
    _history: str | None

    if TYPE_CHECKING:

        def _check_columns(self, columns: Any) -> None:  # noqa: D102 - provided by KeysMixin
            ...

    @property
    def cluster_columns(self) -> tuple[str, ...]:
        """Columns the lakehouse table is clustered by (original names); empty: none."""
        return tuple(self._cluster_by)

    def set_cluster_columns(self, *columns: str) -> None:
        """Cluster the lakehouse table by ``columns`` (none: no clustering).

        Rows with close values of these columns are kept in the same files, so a query or
        a MERGE that filters on them reads fewer files. The writer's MERGE restricts itself
        to the range of the first primary key column, so clustering by that column (or the
        key) speeds up changes; other columns speed up readers that filter on them.

        Raises:
            SchemaError: A column does not exist, is named twice, has a type without
                statistics (array, map, record), or more than four are given.
        """
        columns = tuple(columns)
        self._check_columns(columns)
        if len(set(columns)) != len(columns):
            raise SchemaError("A clustering column is named twice", table=self.name)
        if len(columns) > MAX_CLUSTER_COLUMNS:
            raise SchemaError(
                f"At most {MAX_CLUSTER_COLUMNS} clustering columns (Delta liquid clustering)",
                table=self.name,
                columns=list(columns),
            )
        for column in columns:
            avro = self._fields[column].to_avro()["type"]
            kind = next((t for t in avro if t != "null"), avro) if isinstance(avro, list) else avro
            kind = kind.get("type") if isinstance(kind, dict) else kind
            if kind in _UNCLUSTERABLE:
                raise SchemaError(
                    f"A {kind} column cannot be a clustering column", table=self.name, column=column
                )
        self._cluster_by = list(columns)

    @property
    def history(self) -> str | None:
        """The history the lakehouse table keeps (``"scd2"``), or None: the current rows only."""
        return self._history

    def set_history(self, kind: str | None) -> None:
        """Keep the table's history in the lakehouse: ``"scd2"`` (None: current rows only).

        An SCD type 2 table keeps one row per version of a key: its payload and technical
        fields, ``__valid_from`` (the change time it took effect), ``__valid_to`` (the change
        time of the next change of its key, or of its delete or TRUNCATE; NULL while current)
        and ``__is_current``. An UPDATE or UPSERT closes the key's version and opens a new one,
        a DELETE closes it, a GDPR delete removes every version of the key up to it. The table
        needs a primary key (checked when the schema is written out).

        Raises:
            SchemaError: ``kind`` is not one of :data:`HISTORY_KINDS`.
        """
        if kind is not None and kind not in HISTORY_KINDS:
            raise SchemaError(
                f"Unknown history {kind!r}; one of {', '.join(HISTORY_KINDS)}, or None",
                table=self.name,
            )
        self._history = kind
