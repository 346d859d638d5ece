"""A local StarTek REST API for the documentation's StarTekReader: attributes, page by page.

``GET /attributes?page=N`` (N from 1) answers ``{"items": [...]}``, the attributes of that page,
to requests that carry ``Authorization: Bearer <token>``; others get 401. It runs on a free
loopback port in a background thread (the flow under test runs its own event loop).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from typing import Any, Self

from aiohttp import web

PAGES = 3
ATTRIBUTES = [  # Name, AttributeType, AttributeValue; page = position // 2 + 1
    {"Name": "Reactor1/Temperature", "AttributeType": "Measure", "AttributeValue": "81.5"},
    {"Name": "Reactor1/Pressure", "AttributeType": "Measure", "AttributeValue": "2.02"},
    {"Name": "Reactor1/Pressure", "AttributeType": "Limit", "AttributeValue": "2.5"},
    {"Name": "Reactor2/Temperature", "AttributeType": "Measure", "AttributeValue": None},
    {"Name": "Reactor2/Status", "AttributeType": "Error", "AttributeValue": "sensor offline"},
]


class StarTekApi:
    """The API, serving :data:`ATTRIBUTES` in :data:`PAGES` pages to holders of ``token``.

    Attributes:
        requests: Pages served, by page number.
    """

    def __init__(self, token: str) -> None:
        self.token = token
        self.requests: Counter[int] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _attributes(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401, text="unauthorized")
        page = int(request.query["page"])
        self.requests[page] += 1
        await asyncio.sleep(0.01 * (PAGES - page))  # later pages answer first
        items: list[dict[str, Any]] = ATTRIBUTES[(page - 1) * 2 : page * 2]
        return web.json_response({"items": items})

    async def _start(self, sock: socket.socket) -> None:
        app = web.Application()
        app.router.add_get("/attributes", self._attributes)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    def __enter__(self) -> Self:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(sock), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
