"""Register the lakehouse's Delta tables by name in a catalog (``LAKEHOUSE_CATALOG``).

With a catalog configured, every table the writer keeps is registered as an external table
pointing at its location: ``<catalog>.<namespace>.<table>``, or ``<namespace>.<table>`` in
Spark's session catalog ``spark_catalog`` (a Hive metastore, AWS Glue through its
Hive-compatible client). The system tables (``_commits``, ``_execution_log``, ``_lineage``,
``_rejected``, ``_writer_state``, every ``_``-table at the lakehouse root) go under one
system namespace (``LAKEHOUSE_CATALOG_SYSTEM_NAMESPACE``). Registration is Spark SQL only::

    CREATE SCHEMA IF NOT EXISTS `shop`
    CREATE TABLE IF NOT EXISTS `shop`.`orders` USING DELTA LOCATION '/lake/SHOP/ORDERS'

Delta keeps the schema, column comments and table properties (the ``flow.*`` governance
metadata) in the table's log, not in the catalog: ``DESCRIBE TABLE EXTENDED`` by name reads
them from there, so an evolved column shows without registering again (the writer changes
tables by path; no process caches the relation across that).

Catalog names allow ``[a-z0-9_]`` only (Spark's session catalog refuses any other character
in a table or schema name; Hive and Glue fold case): :func:`catalog_name` lowercases and
turns every other character into ``_``. Two tables whose names fold alike (``A$B`` and
``A_B``) would share one name: the second one's registration finds the name pointing at
another location and fails, naming both.

When: :meth:`TableCatalog.register_found` at the writer's start registers every table under
the lakehouse root that is not registered yet (tables made before the catalog was configured);
:meth:`TableCatalog.register_new` after each batch registers the tables created since (by
any path: Spark, the delta-rs fast paths, tables created ahead of their rows, the system
tables the batch's appends created). Each table is looked at once a process.

A failure raises :class:`CatalogError` naming the table and the catalog, and stops the batch
(hence the writer): the batch's rows are already committed to Delta and its state saved, so
nothing is lost or applied twice, and the next start registers what is missing before it
reads on. Skipping it would leave a table that cannot be found by name without anyone told.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.runtime.session import quote_name
from lakehouse_writer.tables.files import find_tables
from lakehouse_writer.tables.manager import TableRef, spark_sql_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SESSION_CATALOG",
    "CatalogError",
    "CatalogName",
    "TableCatalog",
    "catalog_name",
    "create_schema_sql",
    "register_sql",
    "register_tables",
]

log = logging.getLogger(__name__)

SESSION_CATALOG = "spark_catalog"  # Spark's own catalog: two-level names
CATALOG_IMPLEMENTATION = "spark.sql.catalogImplementation"  # static: set when the JVM starts
SYSTEM_PREFIX = "_"  # system tables sit at <lakehouse>/_name
_NOT_ALLOWED = re.compile(r"[^a-z0-9_]")  # Spark's session catalog: letters, digits and _


class CatalogError(LakehouseWriterError):
    """A table could not be registered in the catalog (``LAKEHOUSE_CATALOG``)."""


def catalog_name(name: str) -> str:
    """``name`` as a catalog identifier: lowercase, any character but ``[a-z0-9_]`` as ``_``.

    ``SHOP`` -> ``shop``; ``/BIC/AZSALES$`` -> ``_bic_azsales_``; ``Müller`` -> ``m_ller``.
    """
    return _NOT_ALLOWED.sub("_", name.lower())


@dataclass(frozen=True)
class CatalogName:
    """Where a table is registered: catalog (``spark_catalog``: none), namespace, table."""

    catalog: str
    namespace: str
    table: str

    @classmethod
    def of(cls, catalog: str, namespace: str, table: str) -> CatalogName:
        """The catalog name of lakehouse table ``namespace.table`` (original names)."""
        return cls(catalog, catalog_name(namespace), catalog_name(table))

    @property
    def schema_sql(self) -> str:
        """The namespace, quoted (with its catalog unless it is the session catalog)."""
        parts = (
            [self.namespace] if self.catalog == SESSION_CATALOG else [self.catalog, self.namespace]
        )
        return ".".join(quote_name(p) for p in parts)

    @property
    def sql(self) -> str:
        """The table's name, quoted: ```shop`.`orders``` or ```main`.`shop`.`orders```."""
        return f"{self.schema_sql}.{quote_name(self.table)}"

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.table}"


def create_schema_sql(name: CatalogName) -> str:
    """``CREATE SCHEMA IF NOT EXISTS`` of the table's namespace."""
    return f"CREATE SCHEMA IF NOT EXISTS {name.schema_sql}"


def register_sql(name: CatalogName, path: str) -> str:
    """``CREATE TABLE IF NOT EXISTS ... USING DELTA LOCATION`` of the table at ``path``.

    No columns, comments or properties: Delta takes them from the table's log.
    """
    return f"CREATE TABLE IF NOT EXISTS {name.sql} USING DELTA LOCATION '{spark_sql_string(path)}'"


def same_location(registered: str, path: str) -> bool:
    """True when the catalog's location ``registered`` is the table's ``path``.

    The catalog qualifies a local path (``file:/lake/t`` for ``/lake/t``) and may show it as
    a URI (``%20`` for a space).
    """

    def plain(text: str) -> str:
        text = unquote(text.rstrip("/"))
        return (
            text.removeprefix("file://")
            if text.startswith("file:///")
            else text.removeprefix("file:")
        )

    return plain(registered) == plain(path)


class TableCatalog:
    """Registers the lakehouse's tables in ``catalog`` (see the module docstring).

    Args:
        spark: The writer's session; ``catalog`` must be one of its catalogs.
        catalog: The catalog's name in Spark (``spark_catalog``, a Unity Catalog name).
        system_namespace: The namespace of the system tables (original spelling).
        lakehouse: The lakehouse root.
    """

    def __init__(
        self, spark: SparkSession, catalog: str, system_namespace: str, lakehouse: str
    ) -> None:
        self._spark = spark
        self._catalog = catalog
        self._system = system_namespace
        self._lakehouse = lakehouse.rstrip("/")
        self._done: set[str] = set()  # paths registered (or found registered) by this process
        self._schemas: set[str] = set()
        self._lock = threading.Lock()

    def name_of(self, table: str) -> CatalogName:
        """The catalog name of ``NAMESPACE.NAME`` or of system table ``_name``."""
        if table.startswith(SYSTEM_PREFIX):
            return CatalogName.of(self._catalog, self._system, table)
        namespace, _, name = table.rpartition(".")
        return CatalogName.of(self._catalog, namespace, name)

    def check(self) -> None:
        """Raise unless names registered in the catalog outlive this session.

        Raises:
            CatalogError: The catalog is ``spark_catalog`` and the session's is Spark's
                in-memory one (no Hive support): every name would be gone at exit.
        """
        implementation = self._spark.conf.get(CATALOG_IMPLEMENTATION, "in-memory")
        if self._catalog == SESSION_CATALOG and implementation == "in-memory":
            raise CatalogError(
                "the session's catalog is Spark's in-memory one: names registered there are "
                "gone when the writer exits. Give the session Hive support "
                f"({CATALOG_IMPLEMENTATION}=hive and the metastore's settings; a session the "
                "writer starts gets it unless --conf says otherwise), or name another catalog",
                catalog=self._catalog,
            )

    def register_found(self) -> int:
        """Register every table under the lakehouse root not registered yet; how many looked at.

        Raises:
            CatalogError: A table could not be registered.
        """
        found = find_tables(self._spark, self._lakehouse)
        for table, path in found:
            self.register(table, path)
        return len(found)

    def register_new(self, refs: Iterable[TableRef], system: Iterable[str] = ()) -> None:
        """Register the tables ``refs`` and system tables ``system`` not registered yet.

        ``system`` holds the ``_name``s of the system tables the writer has written: no
        storage is listed.

        Raises:
            CatalogError: A table could not be registered.
        """
        for ref in refs:
            self.register(ref.qualified, ref.path(self._lakehouse))
        for name in system:
            self.register(name, f"{self._lakehouse}/{name}")

    def register(self, table: str, path: str) -> None:
        """Register ``table`` (``NAMESPACE.NAME`` or ``_name``) at ``path``, once a process.

        Raises:
            CatalogError: The catalog refused, or the name points at another location.
        """
        with self._lock:
            if path in self._done:
                return
            name = self.name_of(table)
            try:
                if name.schema_sql not in self._schemas:
                    self._spark.sql(create_schema_sql(name))
                    self._schemas.add(name.schema_sql)
                self._spark.sql(register_sql(name, path))
                registered = self._location(name)
            except Exception as exc:  # py4j and Spark's analysis errors alike
                raise CatalogError(
                    f"the table could not be registered: {_first_line(exc)}",
                    table=table,
                    catalog=self._catalog,
                    name=str(name),
                ) from exc
            if not same_location(registered, path):
                raise CatalogError(
                    "the name is taken by a table at another location (names fold to "
                    "lowercase [a-z0-9_]: two tables may share one); rename one table, or drop "
                    "the catalog entry if it is stale",
                    table=table,
                    catalog=self._catalog,
                    name=str(name),
                    location=path,
                    registered=registered,
                )
            self._done.add(path)
            log.info("table registered table=%s name=%s location=%s", table, name, path)

    def _location(self, name: CatalogName) -> str:
        rows = self._spark.sql(f"DESCRIBE TABLE EXTENDED {name.sql}").collect()
        return next((str(r[1]) for r in rows if r[0] == "Location"), "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def register_tables(
    spark: SparkSession,
    catalog: str | None,
    system_namespace: str,
    lakehouse: str,
    refs: Iterable[TableRef],
) -> None:
    """Register ``refs`` in ``catalog`` unless there already (nothing when ``catalog`` is unset).

    For the commands that write tables outside a running writer (``replay-rejected``,
    ``rebuild``): a table they create or make again is found by name, as the writer's are.

    Raises:
        CatalogError: A table could not be registered.
    """
    if not catalog:
        return
    names = TableCatalog(spark, catalog, system_namespace, lakehouse)
    names.check()
    names.register_new(refs)
