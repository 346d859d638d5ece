"""The ``tpch`` flow: a TPC-H source system (DuckDB file, :mod:`flows.tpch_source`) to Kafka.

- **initial load**: all eight tables, each a TRUNCATE followed by REPLACE rows, in one
  commit (readers see the whole snapshot or none of it); the pointer is the source's last
  change-log sequence number.
- **delta load**: the orders and line items changed since the pointer, per key its latest
  change: INSERT and UPDATE rows with the current image, DELETE rows with the last image
  from the tombstone tables; the new pointer goes in the same commit.

Run: ``TPCH_SOURCE_PATH=/path/source.duckdb producer-lib run flows.tpch:TpchFlow --load initial``
(``TPCH_TOPIC_PREFIX``, default ``tpch.``, prefixes the topic of every table).
"""

from __future__ import annotations

import os

from flows.tpch_source import TABLES
from producer_lib import (
    FunctionRunner,
    KafkaProducer,
    KeySchema,
    RowType,
    SourceAdapter,
    Target,
    create_key_row,
    create_truncate_row,
)

BATCH_ROWS = 50_000
NAMESPACE = "tpch"
CHANGED_TABLES = ("orders", "lineitem")  # what the source's change log tracks
OWNER = "tpch-team@example.com"


class TpchFlow(FunctionRunner):
    """TPC-H tables from a DuckDB source file; see the module docstring."""

    function_name = "tpch"
    source_system = "TPCH"

    def __init__(self) -> None:
        super().__init__()
        self.source_path = os.environ.get("TPCH_SOURCE_PATH", ".devstack/tpch/source.duckdb")
        self.topic_prefix = os.environ.get("TPCH_TOPIC_PREFIX", "tpch.")

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """All eight tables as TRUNCATE + REPLACE, one commit."""
        with _attached(reader, self.source_path):
            for table in TABLES:
                target = await self._load(producer, reader, table, f"SELECT * FROM src.{table}")
                truncate = create_truncate_row(target.value_schema, None)
                producer.produce_row(
                    target,
                    create_key_row(truncate, target.key_schema),
                    truncate,
                    RowType.TRUNCATE,
                    partition=0,
                )
                producer.produce_from_duckdb(table, target, BATCH_ROWS, RowType.REPLACE)
            self.set_delta_pointer(_last_seq(reader))
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """Orders and line items changed since the pointer: INSERT/UPDATE/DELETE rows."""
        since = self.get_delta_pointer()
        if since is None:
            raise RuntimeError("no delta pointer yet: run the initial load first")
        with _attached(reader, self.source_path):
            until = _last_seq(reader)
            for table in CHANGED_TABLES:
                await self._delta(producer, reader, table, since, until)
        self.set_delta_pointer(until)
        producer.commit()

    async def _delta(
        self, producer: KafkaProducer, reader: SourceAdapter, table: str, since: int, until: int
    ) -> None:
        keys = TABLES[table]
        on = " AND ".join(f"t.{k} = c.k{i + 1}" for i, k in enumerate(keys))
        await reader.load(f"{table}_changes", _latest_changes(table, since, until), NAMESPACE)
        target = await self._load(
            producer,
            reader,
            table,
            f"SELECT t.* FROM src.{table} t SEMI JOIN {table}_changes c ON {on} AND c.op <> 'D'",
        )
        for op, row_type in (("I", RowType.INSERT), ("U", RowType.UPDATE)):
            producer.produce_from_duckdb(
                f"SELECT t.* FROM {table} t SEMI JOIN {table}_changes c ON {on} AND c.op = '{op}'",
                target,
                BATCH_ROWS,
                row_type,
            )
        await reader.load(
            f"{table}_deleted",
            f"SELECT t.* EXCLUDE (seq) FROM src.deleted_{table} "
            f"t SEMI JOIN {table}_changes c ON {on} AND c.op = 'D'",
            NAMESPACE,
        )
        producer.produce_from_duckdb(f"{table}_deleted", target, BATCH_ROWS, RowType.DELETE)

    async def _load(
        self, producer: KafkaProducer, reader: SourceAdapter, table: str, sql: str
    ) -> Target:
        """Stage ``sql`` as ``table``, declare its key and metadata, return its target."""
        reader.set_schema_name_for_sql(table, NAMESPACE)
        schema = await reader.load(table, sql, NAMESPACE, self.source_system)
        schema.set_primary_keys(*TABLES[table])
        reader.check_primary_key(table, schema)
        schema.set_table_comment(f"TPC-H {table}")
        schema.set_data_product_owner_email(OWNER)
        topic = f"{self.topic_prefix}{table}"
        return producer.add_target(topic, table, KeySchema(schema), schema)


def _latest_changes(table: str, since: int, until: int) -> str:
    """Per key, the latest change logged in ``(since, until]``: keys ``k1``, ``k2`` and ``op``."""
    return (
        f"SELECT k1, k2, op FROM src.change_log WHERE tbl = '{table}' "
        f"AND seq > {int(since)} AND seq <= {int(until)} "
        "QUALIFY row_number() OVER (PARTITION BY k1, k2 ORDER BY seq DESC) = 1"
    )


def _last_seq(reader: SourceAdapter) -> int:
    query = "SELECT coalesce(max(seq), 0) FROM src.change_log"
    return int(reader.connection.execute(query).fetchone()[0])


class _attached:
    """Attach the source read-only as ``src`` for the duration of a load."""

    def __init__(self, reader: SourceAdapter, path: str) -> None:
        self.connection, self.path = reader.connection, path

    def __enter__(self) -> None:
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"TPC-H source not found: {self.path} (flows.tpch_source)")
        quoted = self.path.replace("'", "''")
        self.connection.execute(f"ATTACH '{quoted}' AS src (READ_ONLY)")

    def __exit__(self, *exc: object) -> None:
        self.connection.execute("DETACH src")
