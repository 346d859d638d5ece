"""The ``postgres`` flow: customers and orders of a web shop, from PostgreSQL to Kafka.

Source: ``shop.customers`` and ``shop.orders`` (:func:`create_demo_schema`); primary keys, the
foreign key orders -> customers and the comments come from the catalog into the Avro schemas.
Triggers stamp ``updated_at`` with ``now()`` (the start of the writing transaction) and write
the key of a deleted row into the tombstone table ``shop.<table>_deleted``.

- **initial load**: per table a TRUNCATE, then every row as REPLACE; one commit.
- **delta load**: per table the rows written since the pointer as UPSERT, the keys deleted
  since then as EXTERMINATE; one commit, which also moves the pointer.

The pointer is an ``updated_at`` (ISO string). A row is stamped when its transaction starts
but visible only when it commits, so "the newest stamp read" could pass rows that commit later
with an older stamp. Each load first takes a *horizon*: the start of the oldest open
transaction, else now. Rows stamped before it are committed, later ones may not be. A delta
reads ``pointer < updated_at < horizon`` and moves the pointer to the newest stamp it read: no
row is missed, none read twice, a delta without changes publishes nothing, and a transaction
left open holds deltas back. The flow's user needs the role ``pg_read_all_stats``.

Run: ``POSTGRES_FLOW_DSN=postgresql://flow@db/shop producer-lib run
flows.postgres_flow:PostgresOrdersFlow --load initial`` (``POSTGRES_FLOW_TOPIC_PREFIX``,
default ``shopdb.``, prefixes the topic of each table).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import psycopg

from producer_lib import (
    FunctionRunner,
    KafkaProducer,
    KeySchema,
    PostgresReader,
    RowType,
    Target,
    create_key_row,
    create_truncate_row,
)
from producer_lib.errors import ConfigError, SourceError

NAMESPACE = "shopdb"
TABLES = {"customers": "customer_id", "orders": "order_id"}  # table -> primary key
BATCH_ROWS = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Only client sessions write shop rows: a long autovacuum must not hold deltas back.
HORIZON_SQL = """SELECT pg_has_role('pg_read_all_stats', 'USAGE'),
    least(now(), min(xact_start) FILTER (WHERE backend_type = 'client backend'))
FROM pg_stat_activity"""


class PostgresOrdersFlow(FunctionRunner):
    """Customers and orders from PostgreSQL; see the module docstring."""

    function_name = "postgres_orders"
    source_system = "SHOPDB"

    def __init__(self) -> None:
        super().__init__()
        self.dsn = os.environ.get("POSTGRES_FLOW_DSN", "")
        self.topic_prefix = os.environ.get("POSTGRES_FLOW_TOPIC_PREFIX", "shopdb.")

    def create_reader(self) -> PostgresReader:
        """A reader of the database that ``POSTGRES_FLOW_DSN`` names."""
        if not self.dsn:
            raise ConfigError(
                "set POSTGRES_FLOW_DSN to the shop database (libpq DSN or URL)",
                flow=self.function_name,
            )
        return PostgresReader(self.dsn, self.logger)

    async def initial_load(self, producer: KafkaProducer, reader: PostgresReader) -> None:
        """Every table as TRUNCATE + REPLACE rows, one commit."""
        horizon, newest = await _horizon(reader), []
        for table in TABLES:
            target = await self._stage(producer, reader, table, "true")
            truncate = create_truncate_row(target.value_schema, None)
            producer.produce_row(
                target,
                create_key_row(truncate, target.key_schema),
                truncate,
                RowType.TRUNCATE,
                partition=0,
            )
            producer.produce_from_duckdb(f"pg_{table}", target, BATCH_ROWS, RowType.REPLACE)
            newest.append(_newest(reader, f"pg_{table}", "updated_at", horizon))
        self._commit(producer, newest)

    async def delta_load(self, producer: KafkaProducer, reader: PostgresReader) -> None:
        """Rows written since the pointer as UPSERT, keys deleted since then as EXTERMINATE."""
        horizon, since, newest = await _horizon(reader), self.get_delta_pointer(), []
        for table, key in TABLES.items():
            newest += await self._delta(producer, reader, table, key, since, horizon)
        self._commit(producer, newest)

    async def _delta(
        self,
        producer: KafkaProducer,
        reader: PostgresReader,
        table: str,
        key: str,
        since: str | None,
        horizon: datetime,
    ) -> list[datetime | None]:
        """One table's changes stamped in ``(since, horizon)``; returns the newest stamps."""
        changed, deleted = f"pg_{table}", f"pg_{table}_deleted"
        target = await self._stage(producer, reader, table, _window("updated_at", since, horizon))
        await reader.load(
            deleted,
            f"SELECT {key}, max(deleted_at) AS deleted_at FROM shop."
            f"{table}_deleted WHERE {_window('deleted_at', since, horizon)} "
            f"GROUP BY {key}",
            NAMESPACE,
        )
        # A deleted row: only its key is known, the rest is null. Deleted, then written: UPSERT.
        gone = (
            f"SELECT * FROM {changed} WHERE false UNION ALL BY NAME SELECT {key} "
            f"FROM {deleted} WHERE {key} NOT IN (SELECT {key} FROM {changed})"
        )
        for rows, row_type in (
            (gone, RowType.EXTERMINATE),
            (f"SELECT * FROM {changed}", RowType.UPSERT),
        ):
            if reader.connection.execute(f"SELECT count(*) FROM ({rows})").fetchone()[0]:
                producer.produce_from_duckdb(rows, target, BATCH_ROWS, row_type)
        return [
            _newest(reader, changed, "updated_at", horizon),
            _newest(reader, deleted, "deleted_at", horizon),
        ]

    async def _stage(
        self, producer: KafkaProducer, reader: PostgresReader, table: str, where: str
    ) -> Target:
        """Read the rows of ``shop.<table>`` matching ``where`` into ``pg_<table>``."""
        reader.set_schema_name_for_sql(table, NAMESPACE)
        schema = await reader.load(
            f"pg_{table}",
            f"SELECT * FROM shop.{table} WHERE {where}",
            NAMESPACE,
            self.source_system,
        )
        if not schema.pks:
            raise SourceError("no primary key in the catalog", table=f"shop.{table}")
        schema.set_data_product_owner_email("shop-data@example.com")
        return producer.add_target(self.topic_prefix + table, table, KeySchema(schema), schema)

    def _commit(self, producer: KafkaProducer, newest: list[datetime | None]) -> None:
        """Stage the newest stamp read (if any) as the pointer; commit it with the rows."""
        stamps = [stamp for stamp in newest if stamp is not None]
        if stamps:
            self.set_delta_pointer(max(stamps).isoformat())
        producer.commit()


async def _horizon(reader: PostgresReader) -> datetime:
    """Start of the oldest open transaction, else now: rows stamped before it are visible."""
    await reader.pg.rollback()  # a new transaction takes a new pg_stat_activity snapshot
    try:
        cursor = await reader.pg.execute(HORIZON_SQL)
        can_see_all, horizon = await cursor.fetchone() or (False, None)
    finally:
        await reader.pg.rollback()
    if not can_see_all:
        raise SourceError(
            "cannot see other sessions' transactions: GRANT pg_read_all_stats TO the flow's user",
            user=reader.pg.info.user,
        )
    return horizon


def _window(column: str, since: str | None, horizon: datetime) -> str:
    """SQL condition ``since < column < horizon`` (the pointer is parsed, never pasted)."""
    upper = f"{column} < '{horizon.isoformat()}'::timestamptz"
    if since is None:
        return upper
    return f"{column} > '{datetime.fromisoformat(since).isoformat()}'::timestamptz AND {upper}"


def _newest(reader: PostgresReader, table: str, column: str, horizon: datetime) -> datetime | None:
    """The newest stamp in the staged ``table`` before ``horizon`` (microseconds: exact)."""
    before = (horizon - _EPOCH) // timedelta(microseconds=1)
    query = f"SELECT max(epoch_us({column})) FROM {table} WHERE epoch_us({column}) < ?"
    newest = reader.connection.execute(query, [before]).fetchone()[0]
    return None if newest is None else _EPOCH + timedelta(microseconds=newest)


DEMO_SQL = """DROP SCHEMA IF EXISTS shop CASCADE; CREATE SCHEMA shop;
CREATE TABLE shop.customers (customer_id bigint PRIMARY KEY, name text NOT NULL,
    email varchar(200), country char(2), updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.orders (order_id bigint PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES shop.customers, amount numeric(12, 2) NOT NULL,
    status varchar(20) NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
COMMENT ON TABLE shop.customers IS 'Customers of the web shop';
COMMENT ON TABLE shop.orders IS 'Orders of the web shop, one row per order';
COMMENT ON COLUMN shop.orders.amount IS 'Order total in EUR';
INSERT INTO shop.customers (customer_id, name, email, country) SELECT g, 'Customer ' || g,
    'c' || g || '@example.com', (ARRAY['DE', 'FR', 'NL'])[g % 3 + 1] FROM generate_series(1, 5) g;
INSERT INTO shop.orders (order_id, customer_id, amount, status)
    SELECT g, g % 5 + 1, g * 10.25, 'placed' FROM generate_series(1, 20) g;
CREATE FUNCTION shop.stamp() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN NEW.updated_at := now(); RETURN NEW; END $$;
CREATE FUNCTION shop.tombstone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN EXECUTE format(
    'INSERT INTO shop.%I (%I) VALUES (($1).%I)', TG_TABLE_NAME || '_deleted', TG_ARGV[0],
    TG_ARGV[0]) USING OLD; RETURN OLD; END $$;
"""
DEMO_TABLE_SQL = """CREATE TABLE shop.{table}_deleted ({key} bigint NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now());
CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON shop.{table}
    FOR EACH ROW EXECUTE FUNCTION shop.stamp();
CREATE TRIGGER tombstone AFTER DELETE ON shop.{table}
    FOR EACH ROW EXECUTE FUNCTION shop.tombstone('{key}');
"""


def create_demo_schema(dsn: str) -> None:
    """(Re)create schema ``shop``: 5 customers, 20 orders, stamp and tombstone triggers."""
    tables = "".join(DEMO_TABLE_SQL.format(table=t, key=k) for t, k in TABLES.items())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DEMO_SQL + tables)  # type: ignore[arg-type]
