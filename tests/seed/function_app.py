"""The documentation's function_app.py: the LABWARE function, copied verbatim.

The names it uses and does not define (``app``, ``functions``, ``logger``,
``SOURCE_SYSTEM_NAME``, ``FUNCTION_NAME``, ``ZONE``) are defined above it, as a flow repo does.
"""

import logging

import azure.functions as functions

from producer_lib import (
    KafkaProducer,
    KafkaSecretSettings,
    OracleConnectionSettings,
    OracleReader,
    get_environment,
)
from tests.seed.runner import Runner

SOURCE_SYSTEM_NAME = "LABWARE"
FUNCTION_NAME = "LABWARE_Reader"
ZONE = "bronze"
logger = logging.getLogger(FUNCTION_NAME)
app = functions.FunctionApp(http_auth_level=functions.AuthLevel.ANONYMOUS)

# ---- from the documentation, verbatim -----------------------------------------------------
# fmt: off


@app.route(route="LABWARE/run", methods=["PUT", "POST", "GET", "PATCH"])
@app.function_name("LABWARE_Reader")
async def run(req: functions.HttpRequest) -> functions.HttpResponse:
    async with OracleReader(OracleConnectionSettings("Labware-Source"), logger) as reader:
        kafka_settings = KafkaSecretSettings()
        with KafkaProducer(SOURCE_SYSTEM_NAME, FUNCTION_NAME,
                                ZONE, get_environment(), kafka_settings, logger) as producer:
            runner = Runner(FUNCTION_NAME, logger)
            return await runner.http(req, producer, reader)
# fmt: on
