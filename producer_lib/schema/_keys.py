"""Primary and foreign keys of a table.

Mixed into :class:`~producer_lib.schema.value_schema.ValueSchema`; the keys travel as the
record-level properties ``primaryKeys`` and ``foreignKeys`` of the schema JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from producer_lib.errors import SchemaError

__all__ = ["ForeignKey", "KeysMixin"]


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key: ``columns`` of this table reference ``ref_columns`` of another table."""

    columns: tuple[str, ...]
    ref_namespace: str
    ref_table: str
    ref_columns: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Return the ``foreignKeys`` entry of the schema JSON."""
        return {
            "columns": list(self.columns),
            "refNamespace": self.ref_namespace,
            "refTable": self.ref_table,
            "refColumns": list(self.ref_columns),
        }


class KeysMixin:
    """Primary key and foreign keys (needs ``name``, ``_fields``, ``_folded`` and ``field()``)."""

    name: str
    _fields: Mapping[str, Any]
    _folded: Mapping[str, str]
    _pks: list[str]
    _fks: list[ForeignKey]

    if TYPE_CHECKING:

        def field(self, name: str) -> Any:  # noqa: D102 - provided by ValueSchema
            ...

    # -- keys -----------------------------------------------------------------------------

    @property
    def pks(self) -> tuple[str, ...]:
        """Primary key columns (original names) in key order; empty for append-only tables.

        Settable: ``schema.pks = {"Name", "AttributeType"}`` replaces the primary key. A set
        takes the schema's column order (a set has none); a list or tuple its own order.

        Raises:
            SchemaError: (on setting) A column does not exist, or is named twice.
        """
        return tuple(self._pks)

    @pks.setter
    def pks(self, columns: Iterable[str]) -> None:
        if isinstance(columns, str):
            columns = (columns,)
        elif isinstance(columns, AbstractSet):
            self._check_columns(columns)
            columns = [name for name in self._fields if name in columns]
        self.set_primary_keys(*columns)

    def add_primary_key(self, *columns: str) -> None:
        """Append ``columns`` to the primary key, in order.

        Raises:
            SchemaError: A column does not exist or is already part of the key.
        """
        self._pks.extend(self._new_keys(columns, self._pks))

    def set_primary_keys(self, *columns: str) -> None:
        """Replace the primary key by ``columns`` (none: the table is append-only).

        Raises:
            SchemaError: A column does not exist or is named twice; the key is then unchanged.
        """
        self._pks = self._new_keys(columns, [])

    def _new_keys(self, columns: Iterable[str], current: Sequence[str]) -> list[str]:
        """``columns`` checked as additions to the key ``current`` (nothing changed yet)."""
        columns = list(columns)
        self._check_columns(columns)
        added: list[str] = []
        for column in columns:
            if column in current or column in added:
                raise SchemaError(
                    "Column is already in the primary key", table=self.name, column=column
                )
            added.append(column)
        return added

    def _check_columns(self, columns: Iterable[str]) -> None:
        """Raise a SchemaError naming the first of ``columns`` the schema does not have."""
        for column in columns:
            if column not in self._fields:
                similar = self._folded.get(str(column).casefold())
                hint = f"; did you mean {similar!r}?" if similar else ""
                raise SchemaError(f"No such column{hint}", table=self.name, column=column)

    @property
    def foreign_keys(self) -> tuple[ForeignKey, ...]:
        """Foreign keys, in the order added."""
        return tuple(self._fks)

    def add_foreign_key(
        self,
        columns: str | Sequence[str],
        ref_namespace: str,
        ref_table: str,
        ref_columns: str | Sequence[str],
    ) -> ForeignKey:
        """Declare that ``columns`` reference ``ref_columns`` of ``ref_namespace.ref_table``.

        Declaring the same foreign key again changes nothing (``augment_schema()`` may run
        more than once); a different one on the same columns is added beside it.

        Returns:
            The foreign key (the one already declared, when it is the same).

        Raises:
            SchemaError: A column does not exist, or the column lists differ in length.
        """
        cols = (columns,) if isinstance(columns, str) else tuple(columns)
        refs = (ref_columns,) if isinstance(ref_columns, str) else tuple(ref_columns)
        for column in cols:
            self.field(column)
        if not cols or len(cols) != len(refs) or not ref_table:
            raise SchemaError(
                "A foreign key needs as many columns as referenced columns",
                table=self.name,
                columns=cols,
                ref_columns=refs,
            )
        fk = ForeignKey(cols, ref_namespace, ref_table, refs)
        if fk not in self._fks:
            self._fks.append(fk)
        return fk
