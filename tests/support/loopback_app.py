"""An aiohttp app on a free loopback port, served from a background thread.

The flows under test run event loops of their own; the fake source systems (a shop API, the
StarTek API) therefore serve from a loop in another thread. A subclass adds its routes in
:meth:`LoopbackApp.routes` and is used as ``with Api(...) as api: ... api.url ...``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Self

from aiohttp import web


class LoopbackApp:
    """Serves :meth:`routes` at :attr:`url` between ``__enter__`` and ``__exit__``."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def routes(self, router: web.UrlDispatcher) -> None:
        """Add the app's routes. Subclasses implement it."""
        raise NotImplementedError

    async def _start(self, sock: socket.socket) -> None:
        app = web.Application()
        self.routes(app.router)
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
