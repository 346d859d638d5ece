"""Reader profiles: who must read the tables, and the Delta table features that allows.

A Delta reader refuses a whole table whose protocol lists a *reader feature* it does not know,
even one no row uses yet. ``LAKEHOUSE_READERS`` names the readers the tables are for (one or
more of :data:`PROFILES`, comma-separated); the writer then turns on only the reader features
every one of them reads (:func:`reader_policy`), and a setting that asks for more is refused
when the writer starts (:class:`FeatureConflict`). Which reader reads what, with sources:
``docs/TABLES.md`` "Reader profiles".

- ``fabric``: Microsoft Fabric's Spark runtimes 1.3 (Delta 3.2) and 2.0 (Delta 4.0), its SQL
  analytics endpoint and Power BI Direct Lake.
- ``databricks``: Databricks Runtime 15.4 LTS and later.
- ``open``: delta-rs (``to_pyarrow_table``, ``to_pandas``), polars, DuckDB, Trino.

Pure: no Spark, no Delta; the writer asks the policy what to do with a table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from lakehouse_writer.errors import LakehouseWriterError, SchemaEvolutionError

__all__ = [
    "COLUMN_MAPPING",
    "DELETION_VECTORS",
    "PROFILES",
    "READER_FEATURES",
    "TIMESTAMP_NTZ",
    "TYPE_WIDENING",
    "TYPE_WIDENING_PREVIEW",
    "FeatureConflict",
    "Profile",
    "ReaderPolicy",
    "parse_readers",
    "reader_policy",
]

Profile = Literal["fabric", "databricks", "open"]
PROFILES: tuple[Profile, ...] = get_args(Profile)

# The reader features a writer's table can get (docs/TABLES.md "The features a table can gain").
DELETION_VECTORS = "deletionVectors"
COLUMN_MAPPING = "columnMapping"
TYPE_WIDENING = "typeWidening"  # Delta 4.0+
TYPE_WIDENING_PREVIEW = "typeWidening-preview"  # Delta 3.2/3.3 (the Spark 3.5 line)
TIMESTAMP_NTZ = "timestampNtz"
READER_FEATURES = (
    DELETION_VECTORS,
    COLUMN_MAPPING,
    TYPE_WIDENING,
    TYPE_WIDENING_PREVIEW,
    TIMESTAMP_NTZ,
)

# What each profile's readers all read (sources in docs/TABLES.md):
# - fabric: the SQL analytics endpoint and Direct Lake read deletion vectors and name-based
#   column mapping, not TIMESTAMP_NTZ, and list no type widening; runtime 1.3's Delta 3.2
#   knows only the preview feature, which the endpoint does not list either.
# - databricks: deletion vectors (12.2 LTS+), column mapping (10.4 LTS+), typeWidening
#   (15.4 LTS+), timestampNtz (13.3 LTS+); not the 3.x preview feature.
# - open: delta-rs' to_pyarrow_table/to_pandas refuse deletion vectors and type widening and
#   read a column-mapped table as nulls; polars refuses column mapping and type widening.
_READS: dict[Profile, frozenset[str]] = {
    "fabric": frozenset({DELETION_VECTORS, COLUMN_MAPPING}),
    "databricks": frozenset({DELETION_VECTORS, COLUMN_MAPPING, TYPE_WIDENING, TIMESTAMP_NTZ}),
    "open": frozenset({TIMESTAMP_NTZ}),
}


class FeatureConflict(LakehouseWriterError):
    """A setting asks for a table feature the readers named in ``LAKEHOUSE_READERS`` refuse."""


@dataclass(frozen=True)
class ReaderPolicy:
    """The reader features the writer may turn on, for the readers it writes for.

    Attributes:
        readers: The profiles, in the order given; empty: no profile, every feature the
            writer's own Delta has (the writer's behaviour without ``LAKEHOUSE_READERS``).
        allowed: The reader features every one of them reads.
        deletion_vectors: Whether new tables get deletion vectors.
    """

    readers: tuple[Profile, ...]
    allowed: frozenset[str]
    deletion_vectors: bool

    def allows(self, feature: str) -> bool:
        """True when every reader of the policy reads tables with ``feature``."""
        return feature in self.allowed

    def creation_properties(self) -> dict[str, str]:
        """The table properties a new table is created with.

        Deletion vectors are said, not left out: a Databricks workspace may turn them on for
        tables that do not say.
        """
        return {"delta.enableDeletionVectors": "true" if self.deletion_vectors else "false"}

    def require(self, feature: str, table: str, **context: str) -> None:
        """Raise unless the readers read ``feature``; the table is then stopped.

        Args:
            feature: The reader feature the table would need (``columnMapping``, ...).
            table: The table, ``namespace.name``.
            context: What needs it (column, old and new type), for the message.

        Raises:
            SchemaEvolutionError: The readers refuse ``feature``; names them and the table.
        """
        if self.allows(feature):
            return
        raise SchemaEvolutionError(
            f"the table would need the Delta reader feature {feature}, which readers "
            f"{','.join(self.readers)} (LAKEHOUSE_READERS) cannot read; change the flow's "
            "schema (a new table), or name readers that read it",
            table=table,
            feature=feature,
            **context,
        )


def parse_readers(text: str | None) -> tuple[Profile, ...]:
    """``"fabric, open"`` -> ``("fabric", "open")``; None or blank: no profile.

    Raises:
        FeatureConflict: A name is not one of :data:`PROFILES`.
    """
    names = [n.strip().lower() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        raise FeatureConflict(
            f"LAKEHOUSE_READERS names unknown readers {unknown}; known: {', '.join(PROFILES)}",
        )
    return tuple(dict.fromkeys(n for n in names if n in PROFILES))  # type: ignore[misc]


def reader_policy(readers: Iterable[Profile], deletion_vectors: bool | None = None) -> ReaderPolicy:
    """The policy for ``readers``, with the deletion-vector setting checked against it.

    Args:
        readers: The profiles (:func:`parse_readers`); none: every feature is allowed.
        deletion_vectors: ``LAKEHOUSE_DELETION_VECTORS`` as set; None when unset (the
            readers decide: on when they all read them).

    Raises:
        FeatureConflict: ``deletion_vectors`` is True and a reader cannot apply them.
    """
    chosen = tuple(readers)
    allowed = frozenset(READER_FEATURES)
    for profile in chosen:
        allowed &= _READS[profile]
    if deletion_vectors and DELETION_VECTORS not in allowed:
        refusing = [p for p in chosen if DELETION_VECTORS not in _READS[p]]
        raise FeatureConflict(
            "LAKEHOUSE_DELETION_VECTORS=true asks for deletion vectors, which readers "
            f"{','.join(refusing)} (LAKEHOUSE_READERS) cannot apply; unset it or set it to "
            "false (a MERGE or DELETE then rewrites the files it changes)",
        )
    on = DELETION_VECTORS in allowed if deletion_vectors is None else deletion_vectors
    return ReaderPolicy(chosen, allowed, on)
