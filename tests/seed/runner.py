"""The documentation's runner.py: the LABWARE flow's Runner, copied verbatim.

Only the ``"..."`` arguments of the governance setters are filled in.
"""

# The documentation's code keeps its own layout: not reformatted, long lines allowed.
# ruff: noqa: E501, W293

from producer_lib import (
    FunctionRunner,
    KeySchema,
    Producer,
    RowType,
    SourceAdapter,
    create_key_row,
    create_truncate_row,
)

# ---- from the documentation, verbatim (the "..." filled in) ------------------------------
# fmt: off


class Runner(FunctionRunner):

    async def initial_load(self, producer: Producer, reader: SourceAdapter):
        target_table = "SAMPLE_PLAN"
        await reader.load(target_table, "select * FROM LIMSPRD.SAMPLE_PLAN", "LABWARE", "LABWARE")
        reader.table_schema.set_data_product_owner_email("labware-owner@example.com")
        reader.table_schema.set_repo_url("https://github.example.com/syensqo/labware-flow")
        reader.table_schema.set_source_system_uri("oracle://standin.example:1521/LIMS")
        reader.table_schema.set_tickets_url("https://tickets.example.com/LABWARE")
        key_schema = KeySchema(reader.table_schema)
        target = producer.add_target(target_table, target_table, key_schema, reader.table_schema)
        truncate_row = create_truncate_row(reader.table_schema, None)
        producer.produce_row(target, create_key_row(truncate_row, key_schema), truncate_row, RowType.TRUNCATE, partition=0)
        producer.produce_from_duckdb(target_table, target, 40000, RowType.REPLACE, partition=0)
        producer.commit()
 
    async def delta_load(self, producer: Producer, reader: SourceAdapter):
        await self.initial_load(producer, reader)
# fmt: on
