"""The StarTek function: the documentation's reader.py put to work the way its function_app.py
and runner.py work for LABWARE. Not from the documentation (it shows no StarTek runner); written
here only as a flow author would, so that its StarTekReader and StarTekAvroSchema run for real.
"""

from __future__ import annotations

import logging

import azure.functions as functions

from producer_lib import (
    FunctionRunner,
    KafkaProducer,
    KafkaSecretSettings,
    KeySchema,
    Producer,
    RowType,
    SourceAdapter,
    create_key_row,
    create_truncate_row,
    get_environment,
)
from tests.seed.reader import StarTekAvroSchema, StarTekReader

SOURCE_SYSTEM_NAME = "STARTEK"
FUNCTION_NAME = "STARTEK_Reader"
ZONE = "bronze"
logger = logging.getLogger(FUNCTION_NAME)
app = functions.FunctionApp(http_auth_level=functions.AuthLevel.ANONYMOUS)


class StarTekRunner(FunctionRunner):
    """Every attribute, as a TRUNCATE and REPLACE rows, like the documentation's Runner."""

    async def initial_load(self, producer: Producer, reader: SourceAdapter) -> None:
        target_table = "STARTEK_ATTRIBUTES"
        await reader.load(target_table, StarTekAvroSchema(target_table, "STARTEK"))
        await reader.augment_schema()  # the documented sequence; a REST API adds nothing
        key_schema = KeySchema(reader.table_schema)
        target = producer.add_target(target_table, target_table, key_schema, reader.table_schema)
        truncate_row = create_truncate_row(reader.table_schema, None)
        producer.produce_row(
            target,
            create_key_row(truncate_row, key_schema),
            truncate_row,
            RowType.TRUNCATE,
            partition=0,
        )
        producer.produce_from_duckdb(target_table, target, 40000, RowType.REPLACE, partition=0)
        producer.commit()

    async def delta_load(self, producer: Producer, reader: SourceAdapter) -> None:
        await self.initial_load(producer, reader)


@app.route(route="STARTEK/run", methods=["PUT", "POST", "GET", "PATCH"])
@app.function_name("STARTEK_Reader")
async def run(req: functions.HttpRequest) -> functions.HttpResponse:
    """The documentation's function, with the StarTek reader (opened by its own __aenter__)."""
    async with StarTekReader(logger) as reader:
        kafka_settings = KafkaSecretSettings()
        with KafkaProducer(
            SOURCE_SYSTEM_NAME, FUNCTION_NAME, ZONE, get_environment(), kafka_settings, logger
        ) as producer:
            runner = StarTekRunner(FUNCTION_NAME, logger)
            return await runner.http(req, producer, reader)
