"""The physical layout a table asks for in the lakehouse: its clustering columns.

Mixed into :class:`~producer_lib.schema.value_schema.ValueSchema`; the columns travel as the
record-level property ``clusterBy`` of the schema JSON. The lakehouse writer creates the
table with Delta liquid clustering on them, and changes the clustering of an existing table
when they change (docs/TABLES.md, "Layout").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from producer_lib.errors import SchemaError

__all__ = ["MAX_CLUSTER_COLUMNS", "LayoutMixin"]

MAX_CLUSTER_COLUMNS = 4  # Delta liquid clustering takes at most four columns
_UNCLUSTERABLE = ("array", "map", "record")  # no min/max statistics to cluster by


class LayoutMixin:
    """Clustering columns (needs ``name``, ``_fields``, ``_cluster_by``, ``_check_columns``)."""

    name: str
    _fields: Mapping[str, Any]
    _cluster_by: list[str]

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
