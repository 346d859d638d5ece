"""The runner of a flow: loads, delta pointer, execution log, lineage and triggers.

Quickstart::

    from producer_lib import FunctionRunner, KeySchema, RowType

    class OrdersFlow(FunctionRunner):
        source_system = "SHOPDB"

        async def initial_load(self, producer, reader):
            schema = await reader.load("ORDERS", "select * from orders", "SHOP", "SHOPDB")
            target = producer.add_target("ORDERS", "ORDERS", KeySchema(schema), schema)
            producer.produce_from_duckdb("ORDERS", target, 40_000, RowType.REPLACE)
            self.set_delta_pointer(max_updated_at)   # moves with this commit's data
            producer.commit()

    result = await OrdersFlow().run("initial")           # or: producer-lib run mod:OrdersFlow

An HTTP-triggered run that outlives ``FLOW_HTTP_WAIT_S`` answers 202 and is polled at
``GET runs/{run_id}`` (:func:`azure_run_status` in a function app; built into
``producer-lib serve``); see :mod:`producer_lib.runner.runs`.
"""

from producer_lib.runner.result import RunFailed, RunResult
from producer_lib.runner.runner import FunctionRunner
from producer_lib.runner.runs import azure_run_status, run_status

__all__ = ["FunctionRunner", "RunFailed", "RunResult", "azure_run_status", "run_status"]
