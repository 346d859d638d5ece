"""The documentation's reader.py: StarTekReader and StarTekAvroSchema, copied verbatim.

Filled in: the ``..`` placeholders (which pages; how a page's data is fetched, from the local
StarTek API at ``STARTEK_URL``). Fixed, each with a comment at the spot: ``async load_page``
lacks its ``def`` (not Python), and ``load_page`` uses ``pa_schema``, a name of ``load``
(a NameError): it is bound to the page's ``schema`` argument.
"""

# The documentation's code keeps its own layout: not reformatted, long lines allowed.
# ruff: noqa: E501

import asyncio
import os
from logging import Logger
from typing import Optional

import aiohttp
import pyarrow as pa

from producer_lib import AvroNVarchar, SourceAdapter, ValueSchema, azure_utils

STARTEK_PAGES = 3  # the pages the local StarTek API serves

# ---- from the documentation, verbatim (placeholders filled, two fixes marked) -------------
# fmt: off


class StarTekReader(SourceAdapter):

    def __init__(self, logger: Logger, page_limit: Optional[int] = None) -> None:  # noqa: UP045
        super().__init__(logger)
        self.startek_credential = azure_utils.read_secret("StarTek-Source")
        self._session = None

    async def __aenter__(self):
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        return self

    async def __aexit__(self, exc_type, exc_val, traceback):
        await self._session.close()
        self._session = None

    async def load(self, duckdb_table_name: str, table_schema: ValueSchema, *args, **kwargs):
        pa_schema = self.prepare_load(duckdb_table_name, table_schema)
        tasks = []
        for page in range(1, STARTEK_PAGES + 1):  # filled: `for page in ..:`
            tasks.append(self.load_page(page, duckdb_table_name, pa_schema))
        results = await asyncio.gather(*tasks)  # noqa: F841 - as documented

    async def load_page(self, page, duckdb_table_name, schema) -> int:  # fixed: `def` was missing
        pa_schema = schema  # fixed: the documentation uses load's name `pa_schema` here
        # filled: `data = [{..}, {..}] # Get the data of this page somehow`
        url = f"{os.environ['STARTEK_URL']}attributes"
        auth = {"Authorization": f"Bearer {self.startek_credential}"}
        async with self._session.get(url, params={"page": page}, headers=auth) as response:
            response.raise_for_status()
            data = (await response.json())["items"]
        input_arrow = pa.Table.from_pylist(data, schema=pa_schema)
        self.insert_page(duckdb_table_name, input_arrow)
        return len(data)


class StarTekAvroSchema(ValueSchema):

    def __init__(self, name: str, namespace: str):
        super().__init__(name, namespace)
        self.add_field("Name", AvroNVarchar(1024), "The node name of the Attribute", False)
        self.add_field("AttributeType", AvroNVarchar(1024), "Type according to StarTek", True)
        self.add_field("AttributeValue", AvroNVarchar(1024), "The measure as string or an error text", True)
        self.pks = {"Name", "AttributeType"}

        self.set_data_product_owner_email("startek-owner@example.com")
        self.set_repo_url("https://github.example.com/syensqo/startek-flow")
        self.set_source_system_uri("https://startek.example.com/api")
        self.set_tickets_url("https://tickets.example.com/STARTEK")
# fmt: on
