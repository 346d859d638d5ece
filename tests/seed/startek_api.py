"""A local StarTek REST API for the documentation's StarTekReader: attributes, page by page.

``GET /attributes?page=N`` (N from 1) answers ``{"items": [...]}``, the attributes of that page,
to requests that carry ``Authorization: Bearer <token>``; others get 401. It runs on a free
loopback port in a background thread (the flow under test runs its own event loop).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from aiohttp import web

from tests.support.loopback_app import LoopbackApp

PAGES = 3
ATTRIBUTES = [  # Name, AttributeType, AttributeValue; page = position // 2 + 1
    {"Name": "Reactor1/Temperature", "AttributeType": "Measure", "AttributeValue": "81.5"},
    {"Name": "Reactor1/Pressure", "AttributeType": "Measure", "AttributeValue": "2.02"},
    {"Name": "Reactor1/Pressure", "AttributeType": "Limit", "AttributeValue": "2.5"},
    {"Name": "Reactor2/Temperature", "AttributeType": "Measure", "AttributeValue": None},
    {"Name": "Reactor2/Status", "AttributeType": "Error", "AttributeValue": "sensor offline"},
]


class StarTekApi(LoopbackApp):
    """The API, serving :data:`ATTRIBUTES` in :data:`PAGES` pages to holders of ``token``.

    Attributes:
        requests: Pages served, by page number.
    """

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self.requests: Counter[int] = Counter()

    async def _attributes(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401, text="unauthorized")
        page = int(request.query["page"])
        self.requests[page] += 1
        await asyncio.sleep(0.01 * (PAGES - page))  # later pages answer first
        items: list[dict[str, Any]] = ATTRIBUTES[(page - 1) * 2 : page * 2]
        return web.json_response({"items": items})

    def routes(self, router: web.UrlDispatcher) -> None:
        """The API's one route."""
        router.add_get("/attributes", self._attributes)
