"""Which topics feed which lakehouse table, as the schema catalog tells it.

The writer keys a Delta table by the value schema's ``namespace.name``, not by topic
(``docs/DESIGN.md``): every topic whose value schema bears that name writes the same table.
That is how one table can take rows from several topics, and how 13 topics that shared a
schema name with different column types once fed one table, which then stopped.

:class:`TableBindings` keeps the latest value schema of each topic found in the catalog, so
that ``add_target`` can refuse a topic whose schema clashes with another topic's schema of
the same name (:mod:`producer_lib.schema.compat`), and warn when the names agree and the
types merge.
"""

from __future__ import annotations

import logging
from collections.abc import Container

from producer_lib.errors import SchemaError
from producer_lib.schema.catalog_records import CatalogRecord, table_of
from producer_lib.schema.compat import column_clashes
from producer_lib.schema.value_schema import ValueSchema

__all__ = ["TableBindings"]

log = logging.getLogger(__name__)


class TableBindings:
    """The latest value schema of each topic, by the table it feeds."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[str, CatalogRecord]] = {}  # topic -> (table, record)
        self._parsed: dict[str, ValueSchema | None] = {}  # fingerprint -> schema
        self._warned: set[str] = set()  # topics warned about

    def add(self, record: CatalogRecord) -> None:
        """Take a catalog record (later records of a topic replace earlier ones)."""
        if record.kind != "value" or not record.topic:
            return
        try:
            table = table_of(record.schema)
        except ValueError:
            table = None
        if table is not None:
            self._latest[record.topic] = (table, record)

    def topics_of(self, table: str) -> list[str]:
        """Topics whose latest value schema names ``table`` (``namespace.name``)."""
        return [topic for topic, (name, _) in self._latest.items() if name == table]

    def check(
        self,
        topic: str,
        value_schema: ValueSchema,
        existing: Container[str],
        logger: logging.Logger | None = None,
    ) -> None:
        """Refuse ``topic`` if another topic feeds the same table with clashing types.

        Args:
            topic: The topic about to be written.
            value_schema: Its value schema.
            existing: Topics that exist in the cluster now; a deleted topic binds nothing.
            logger: Where the warning goes (default: this module's logger).

        Raises:
            SchemaError: Another existing topic's latest value schema has the same
                ``namespace.name`` and a column of the same name whose Delta type does
                not merge with this one's (e.g. STRING and BIGINT).
        """
        table = f"{value_schema.namespace}.{value_schema.name}"
        sharing = [t for t in self.topics_of(table) if t != topic and t in existing]
        for other in sharing:
            self._check_pair(topic, value_schema, other, table)
        if sharing and topic not in self._warned:
            self._warned.add(topic)
            (logger or log).warning(
                "topics share a table (tables are keyed by schema name) table=%s topic=%s "
                "other_topics=%s",
                table,
                topic,
                ",".join(sharing),
            )

    def _check_pair(self, topic: str, value_schema: ValueSchema, other: str, table: str) -> None:
        other_schema = self._schema(self._latest[other][1])
        if other_schema is None:
            return
        clashes = column_clashes(value_schema, other_schema)
        if not clashes:
            return
        first = clashes[0]
        raise SchemaError(
            f"topic {topic!r} cannot feed table {table}: topic {other!r} already feeds it "
            f"with column {first.column!r} as {first.other_type}, and this schema has it as "
            f"{first.type}. The writer keys tables by schema name (namespace.name), not by "
            "topic, and would stop the table; give this schema another name or namespace, "
            "or make the column types agree",
            table=table,
            topic=topic,
            other_topic=other,
            column=first.column,
            type=first.type,
            other_type=first.other_type,
            columns=[c.column for c in clashes] if len(clashes) > 1 else None,
        )

    def _schema(self, record: CatalogRecord) -> ValueSchema | None:
        if record.fingerprint not in self._parsed:
            try:
                self._parsed[record.fingerprint] = ValueSchema.from_avro_json(record.schema)
            except (SchemaError, ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "catalog schema not readable topic=%s fingerprint=%s error=%s",
                    record.topic,
                    record.fingerprint,
                    exc,
                )
                self._parsed[record.fingerprint] = None
        return self._parsed[record.fingerprint]
