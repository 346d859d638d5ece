"""The ``lakehouse`` flow: a data product computed from Delta tables the writer maintains.

Reads the ``tpch`` tables ``orders`` and ``customer`` from the lakehouse (DuckDB's
``delta_scan``), computes revenue per market segment in SQL across both, and publishes it as
``lakehouse.revenue_by_segment`` with the lineage derived from that SQL.

- **initial load**: the whole result, TRUNCATE + REPLACE; the pointer is the Delta version of
  each input table.
- **delta load**: when either input has a Delta version newer than the pointer, the result
  is recomputed and only the segments whose figures differ from the published ones (kept in
  the pointer next to the versions) go out, as UPSERT rows; segments left without orders go
  out as EXTERMINATE rows (delete by key).

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

DEFAULT_TOPIC = "lakehouse.revenue_by_segment"
INPUTS = ("orders", "customer")
REVENUE_SQL = """
SELECT c.c_mktsegment AS segment, count(*) AS order_count, sum(o.o_totalprice) AS revenue
FROM delta_scan('{lake}/tpch/orders') AS o
JOIN delta_scan('{lake}/tpch/customer') AS c ON o.o_custkey = c.c_custkey
GROUP BY c.c_mktsegment
"""


class LakehouseFlow(FunctionRunner):
    """Revenue per market segment from the lakehouse; see the module docstring."""

    function_name = "lakehouse_revenue"
    source_system = "LAKEHOUSE"

    def __init__(self) -> None:
        super().__init__()
        self.lake = Path(os.environ.get("LAKEHOUSE_PATH", "lakehouse")).resolve()
        self.topic = os.environ.get("LAKEHOUSE_FLOW_TOPIC", DEFAULT_TOPIC)

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        """The whole result as TRUNCATE + REPLACE."""
        versions = self._versions()
        target = await self._compute(producer, reader)
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
        """Publish only the segments whose figures changed since the pointer."""
        since, versions = self.get_delta_pointer(), self._versions()
        if since is None:
            raise RuntimeError("no delta pointer yet: run the initial load first")
        if versions == since["versions"]:
            return  # no new Delta version of either input: nothing can have changed
        target = await self._compute(producer, reader)
        published, now = since["segments"], self._figures(reader)
        changed = [s for s, figures in now.items() if published.get(s) != figures]
        if changed:
            listed = ", ".join(_quote(segment) for segment in changed)
            producer.produce_from_duckdb(
                f"SELECT * FROM revenue_by_segment WHERE segment IN ({listed})",
                target,
                10_000,
                RowType.UPSERT,
            )
        for segment in sorted(set(published) - set(now)):  # no orders left: delete by key
            producer.produce_row(
                target, {"segment": segment}, {"segment": segment}, RowType.EXTERMINATE
            )
        self.set_delta_pointer({"versions": versions, "segments": now})
        producer.commit()

    async def _compute(self, producer: KafkaProducer, reader: SourceAdapter) -> Target:
        """Stage the result as ``revenue_by_segment``; return its target."""
        schema = await reader.load(
            "revenue_by_segment",
            REVENUE_SQL.format(lake=self.lake),
            "lakehouse",
            self.source_system,
        )
        schema.set_primary_keys("segment")
        schema.set_table_comment("Order count and revenue per customer market segment")
        schema.set_column_comment("revenue", "sum of o_totalprice of the segment's orders")
        return producer.add_target(self.topic, "revenue_by_segment", KeySchema(schema), schema)

    def _versions(self) -> dict[str, int]:
        return {t: DeltaTable(str(self.lake / "tpch" / t)).version() for t in INPUTS}

    @staticmethod
    def _figures(reader: SourceAdapter) -> dict[str, list[str]]:
        """The staged result as ``{segment: [order_count, revenue]}`` (text: JSON-exact)."""
        rows = reader.connection.execute(
            "SELECT segment, order_count, revenue FROM revenue_by_segment"
        ).fetchall()
        return {segment: [str(count), str(revenue)] for segment, count, revenue in rows}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
