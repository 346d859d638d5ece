"""The ``lakehouse`` flow: a data product computed from Delta tables the writer maintains.

Reads the ``tpch`` tables ``orders`` and ``customer`` from the lakehouse, computes revenue per
market segment in SQL across both, and publishes it as ``lakehouse.revenue_by_segment`` with
the lineage derived from that SQL.

- **initial load**: the whole result (DuckDB's ``delta_scan`` of each table as of its latest
  version), TRUNCATE + REPLACE; the pointer holds those versions and the published figures.
- **delta load**: the tables' change streams since the pointer's versions
  (:func:`producer_lib.sources.load_changes`, the writer's Change Data Feed), reduced to one
  before and one after image per order and customer. Each changed order takes its figures out
  of the segment it was in and adds them to the segment it is in now; a customer who changed
  segment moves all of its orders. Only segments whose figures changed go out, as UPSERT
  rows; a segment left without orders as an EXTERMINATE row (delete by key). No full scan:
  only the orders of customers who moved and the customers of changed orders are looked up,
  as of the versions the changes were read up to.

The pointer moves with the commit only: a failed run reads the same changes again. A
pointer older than the tables' retained history (VACUUM, log retention) fails the delta
load with an error that says to run the initial load.

Run: ``LAKEHOUSE_PATH=/lake producer-lib run flows.lakehouse:LakehouseFlow --load initial``
(``LAKEHOUSE_FLOW_TOPIC`` overrides the topic).
"""

from __future__ import annotations

import os
from pathlib import Path

from deltalake import DeltaTable

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
from producer_lib.schema import ValueSchema
from producer_lib.sources import load_changes, net_images
from producer_lib.staging import load_packaged_extension

DEFAULT_TOPIC = "lakehouse.revenue_by_segment"
INPUTS = {"orders": "o_orderkey", "customer": "c_custkey"}  # table -> key
REVENUE_SQL = """
SELECT c.c_mktsegment AS segment, count(*) AS order_count, sum(o.o_totalprice) AS revenue
FROM delta_scan('{orders}', version := {orders_version}) AS o
JOIN delta_scan('{customer}', version := {customer_version}) AS c ON o.o_custkey = c.c_custkey
GROUP BY c.c_mktsegment
"""
# The change of each segment's figures, from the net order and customer changes (see the
# module docstring). Placeholders: the tables' paths and the versions read up to.
DELTA_SQL = [
    # customers whose segment changed: where their orders were, and where they are now
    """CREATE OR REPLACE TABLE lake_moves AS
    SELECT c_custkey,
        max(c_mktsegment) FILTER (WHERE _image = 'before') AS old_segment,
        max(c_mktsegment) FILTER (WHERE _image = 'after') AS new_segment
    FROM customer_net GROUP BY c_custkey""",
    # order images: changed orders, and the unchanged orders of customers who moved
    """CREATE OR REPLACE TABLE lake_images AS
    SELECT o_orderkey, o_custkey, o_totalprice, _image FROM orders_net
    UNION ALL
    SELECT o.o_orderkey, o.o_custkey, o.o_totalprice, i._image
    FROM delta_scan('{orders}', version := {orders_version}) AS o
    CROSS JOIN (VALUES ('before'), ('after')) AS i(_image)
    WHERE o.o_custkey IN (SELECT c_custkey FROM lake_moves)
      AND o.o_orderkey NOT IN (SELECT o_orderkey FROM orders_net)""",
    # the segment of the other customers those orders belong to (unchanged in the range)
    """CREATE OR REPLACE TABLE lake_segments AS
    SELECT c_custkey, c_mktsegment AS segment
    FROM delta_scan('{customer}', version := {customer_version})
    WHERE c_custkey IN (SELECT o_custkey FROM lake_images)
      AND c_custkey NOT IN (SELECT c_custkey FROM lake_moves)""",
    """CREATE OR REPLACE TABLE lake_delta AS
    SELECT segment, sum(sign) AS order_count, sum(sign * o_totalprice) AS revenue FROM (
        SELECT CASE WHEN m.c_custkey IS NULL THEN s.segment
                    WHEN i._image = 'before' THEN m.old_segment ELSE m.new_segment END AS segment,
               CASE i._image WHEN 'before' THEN -1 ELSE 1 END AS sign, i.o_totalprice
        FROM lake_images AS i
        LEFT JOIN lake_moves AS m ON i.o_custkey = m.c_custkey
        LEFT JOIN lake_segments AS s ON i.o_custkey = s.c_custkey
    ) WHERE segment IS NOT NULL GROUP BY segment""",
    # new figures of the segments whose figures changed: the published ones plus the change
    """CREATE OR REPLACE TABLE lake_changed AS
    SELECT d.segment, coalesce(p.order_count, 0) + d.order_count AS order_count,
           coalesce(p.revenue, 0) + coalesce(d.revenue, 0) AS revenue,
           p.segment IS NOT NULL AS published
    FROM lake_delta AS d LEFT JOIN lake_published AS p USING (segment)
    WHERE d.order_count <> 0 OR coalesce(d.revenue, 0) <> 0""",
]
RESULT_SQL = (
    "SELECT segment, CAST(order_count AS BIGINT) AS order_count, "
    "CAST(revenue AS DECIMAL(38, {scale})) AS revenue FROM lake_changed WHERE order_count > 0"
)


class LakehouseFlow(FunctionRunner):
    """Revenue per market segment from the lakehouse; see the module docstring."""

    function_name = "lakehouse_revenue"
    source_system = "LAKEHOUSE"

    def __init__(self) -> None:
        super().__init__()
        self.lake = Path(os.environ.get("LAKEHOUSE_PATH", "lakehouse")).resolve()
        self.topic = os.environ.get("LAKEHOUSE_FLOW_TOPIC", DEFAULT_TOPIC)

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """The whole result as TRUNCATE + REPLACE, as of each table's latest version."""
        versions = self._versions()
        load_packaged_extension(reader.connection, "delta")
        schema = await reader.load(
            "revenue_by_segment",
            REVENUE_SQL.format(**self._places(versions)),
            "lakehouse",
            self.source_system,
        )
        target = self._target(producer, schema)
        truncate = create_truncate_row(target.value_schema, None)
        producer.produce_row(
            target,
            create_key_row(truncate, target.key_schema),
            truncate,
            RowType.TRUNCATE,
            partition=0,
        )
        producer.produce_from_duckdb("revenue_by_segment", target, 10_000, RowType.REPLACE)
        self.set_delta_pointer({"versions": versions, "segments": self._figures(reader)})
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """Publish the segments whose figures the tables' changes since the pointer moved."""
        since, versions = self.get_delta_pointer(), self._versions()
        if since is None:
            raise RuntimeError("no delta pointer yet: run the initial load first")
        if versions == since["versions"]:
            return  # no new Delta version of either input: nothing can have changed
        load_packaged_extension(reader.connection, "delta")
        for table, key in INPUTS.items():
            await load_changes(
                reader,
                f"{table}_changes",
                self.lake / "tpch" / table,
                since["versions"][table],
                until=versions[table],
                table=f"tpch.{table}",
            )
            await net_images(reader, f"{table}_changes", [key], f"{table}_net")
        published = since["segments"]
        scale = self._stage_published(reader, published)
        for sql in DELTA_SQL:
            await reader.run_locked(reader.connection.execute, sql.format(**self._places(versions)))
        schema = await reader.load(
            "revenue_by_segment", RESULT_SQL.format(scale=scale), "lakehouse", self.source_system
        )
        target = self._target(producer, schema)
        now = dict(published)
        changed = self._figures(reader)
        if changed:
            producer.produce_from_duckdb("revenue_by_segment", target, 10_000, RowType.UPSERT)
            now.update(changed)
        gone = reader.connection.execute(
            "SELECT segment FROM lake_changed WHERE order_count = 0 AND published ORDER BY 1"
        ).fetchall()
        for (segment,) in gone:  # no orders left: delete by key
            producer.produce_row(
                target, {"segment": segment}, {"segment": segment}, RowType.EXTERMINATE
            )
            now.pop(segment, None)
        self.set_delta_pointer({"versions": versions, "segments": now})
        producer.commit()

    def _target(self, producer: KafkaProducer, schema: ValueSchema) -> Target:
        """The topic's target for the staged ``revenue_by_segment``."""
        schema.set_primary_keys("segment")
        schema.set_table_comment("Order count and revenue per customer market segment")
        schema.set_column_comment("revenue", "sum of o_totalprice of the segment's orders")
        return producer.add_target(self.topic, "revenue_by_segment", KeySchema(schema), schema)

    def _versions(self) -> dict[str, int]:
        return {t: DeltaTable(str(self.lake / "tpch" / t)).version() for t in INPUTS}

    def _places(self, versions: dict[str, int]) -> dict[str, str | int]:
        """SQL placeholders: each input's quoted path and version."""
        places: dict[str, str | int] = {}
        for table in INPUTS:
            places[table] = str(self.lake / "tpch" / table).replace("'", "''")
            places[f"{table}_version"] = versions[table]
        return places

    @staticmethod
    def _stage_published(reader: SourceAdapter, published: dict[str, list[str]]) -> int:
        """Stage the pointer's figures as ``lake_published``; return the revenue's scale."""
        (scale,) = reader.connection.execute(
            "SELECT numeric_scale FROM information_schema.columns "
            "WHERE table_name = 'orders_changes' AND column_name = 'o_totalprice'"
        ).fetchone() or (0,)
        scale = int(scale or 0)
        reader.connection.execute(
            "CREATE OR REPLACE TABLE lake_published "
            f"(segment VARCHAR, order_count BIGINT, revenue DECIMAL(38, {scale}))"
        )
        rows = [(segment, int(count), revenue) for segment, (count, revenue) in published.items()]
        if rows:
            reader.connection.executemany("INSERT INTO lake_published VALUES (?, ?, ?)", rows)
        return scale

    @staticmethod
    def _figures(reader: SourceAdapter) -> dict[str, list[str]]:
        """The staged result as ``{segment: [order_count, revenue]}`` (text: JSON-exact)."""
        rows = reader.connection.execute(
            "SELECT segment, order_count, revenue FROM revenue_by_segment"
        ).fetchall()
        return {segment: [str(count), str(revenue)] for segment, count, revenue in rows}
