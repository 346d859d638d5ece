"""A local shop API for the REST flow: deterministic orders, request counts, injected failures.

``ShopApi`` serves ``GET /orders?page=&page_size=[&updated_since=]`` as :mod:`flows.rest_flow`
describes it, from an aiohttp server on a free loopback port in a background thread (the flow
under test runs its own event loop). Change the data between runs, not during one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from aiohttp import web

from tests.support.loopback_app import LoopbackApp

BASE_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class ShopApi(LoopbackApp):
    """Orders ``1..orders``, order ``n`` stamped ``BASE_TIME + (n - 1) // 10`` seconds.

    Ten orders share each stamp, so the newest stamp is shared too (the boundary case).

    Attributes:
        orders: The data, by id (JSON-ready values, ``updated_at`` a datetime).
        requests: Requests served, by page number (``0`` for the one-item total probe).
        failures: Error responses sent (injected with :meth:`fail`).
        max_in_flight: The most requests the server handled at one time.
    """

    def __init__(self, orders: int = 250, delay_s: float = 0.02) -> None:
        super().__init__()
        self.orders = {
            n: _order(
                n,
                n % 7 + 1,
                "placed",
                Decimal(n) * Decimal("1.25"),
                BASE_TIME + timedelta(seconds=(n - 1) // 10),
            )
            for n in range(1, orders + 1)
        }
        self.delay_s = delay_s
        self.requests: Counter[int] = Counter()
        self.failures = 0
        self.in_flight = self.max_in_flight = 0
        self._failing: dict[int, list[int]] = {}

    # -- the data and the failures --------------------------------------------------------

    def put(self, order_id: int, at: datetime, **fields: Any) -> None:
        """Create or change an order, stamped ``at``."""
        old = self.orders.get(order_id) or _order(order_id, 1, "placed", Decimal("0"), at)
        self.orders[order_id] = {**old, **fields, "updated_at": at}

    def newest(self) -> datetime:
        """The newest ``updated_at``."""
        return max(order["updated_at"] for order in self.orders.values())

    def fail(self, page: int, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests of ``page`` with ``status``."""
        self._failing.setdefault(page, []).extend([status] * times)

    # -- serving --------------------------------------------------------------------------

    async def _orders(self, request: web.Request) -> web.Response:
        page, size = int(request.query["page"]), int(request.query["page_size"])
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            if size > 1 and self._failing.get(page):
                self.failures += 1
                return web.Response(status=self._failing[page].pop(0), text="try again later")
            self.requests[page if size > 1 else 0] += 1
            return web.json_response(self._page(request.query.get("updated_since"), page, size))
        finally:
            self.in_flight -= 1

    def _page(self, since: str | None, page: int, size: int) -> dict[str, Any]:
        after = datetime.fromisoformat(since) if since else None
        rows = [
            self.orders[n]
            for n in sorted(self.orders)
            if after is None or self.orders[n]["updated_at"] >= after
        ]
        items = [
            {**row, "updated_at": row["updated_at"].isoformat()}
            for row in rows[(page - 1) * size : page * size]
        ]
        return {"items": items, "total": len(rows)}

    def routes(self, router: web.UrlDispatcher) -> None:
        """The API's one route."""
        router.add_get("/orders", self._orders)


def _order(n: int, customer: int, status: str, amount: Decimal, at: datetime) -> dict[str, Any]:
    return {
        "id": n,
        "customer_id": customer,
        "status": status,
        "amount": str(amount),
        "updated_at": at,
    }
