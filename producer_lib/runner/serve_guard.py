"""The front door of ``producer-lib serve``: who gets in, how much they may send, what is logged.

- :func:`guard`: an aiohttp middleware around :class:`producer_lib.auth.Authenticator`.
  Every route but ``/health`` (and ``/metrics`` with ``FLOW_AUTH_ANONYMOUS_METRICS``) needs
  a credential: 401 without a valid one, 503 while an Entra ID token cannot be checked. A
  server without any authentication configured (loopback, or ``--insecure``) lets callers
  in anonymously but refuses what a web browser sends (403): a request with an ``Origin`` or
  a cross-site ``Sec-Fetch-Site`` header, and (unless ``--insecure``) one whose ``Host`` is
  not a loopback name — so a web page cannot make a developer's browser start a load on
  their machine, directly or by DNS rebinding.
- :class:`ServeSettings`: the request body limit and the bound on concurrent runs.
- :class:`AccessLogger`: one line per request with the caller and the refusal reason, never
  the query string (``code=`` is a key) nor a header.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from producer_lib.auth import ANONYMOUS, Authenticator, Caller, is_loopback
from producer_lib.errors import AuthUnavailable, Unauthorized
from producer_lib.settings import EnvSettings

__all__ = ["CALLER", "REFUSED", "AccessLogger", "ServeSettings", "guard", "json_response"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CALLER = web.RequestKey("producer_lib_caller", Caller)
REFUSED = web.RequestKey("producer_lib_refused", str)  # the reason, for the access log
_PUBLIC = frozenset({"/health"})
_UNAUTHORIZED = (
    "unauthorized: send a function key (x-functions-key header or code parameter) or an "
    "Entra ID access token (Authorization: Bearer)"
)
_RETRY_AFTER_S = "30"  # a fetch of the tenant's keys is retried after its cooldown at most
_QUIET = frozenset({"/health", "/metrics"})  # probes and scrapes: debug level when answered


class ServeSettings(EnvSettings):
    """Limits of ``producer-lib serve`` (env prefix ``FLOW_``).

    Attributes:
        max_body_bytes: Largest request body (``FLOW_MAX_BODY_BYTES``); larger: 413. A run
            request's body is a few parameters.
        max_concurrent_runs: Runs in progress at once in this server
            (``FLOW_MAX_CONCURRENT_RUNS``); one more: 429 with ``Retry-After``.
    """

    model_config = SettingsConfigDict(env_prefix="FLOW_")
    _what: ClassVar[str] = "server settings"

    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    max_concurrent_runs: int = Field(default=4, ge=1)


def json_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON answer (values that JSON lacks, e.g. datetimes, as strings)."""
    return web.json_response(
        body, status=status, headers=headers, dumps=lambda o: json.dumps(o, default=str)
    )


def guard(authenticator: Authenticator, insecure: bool = False) -> Any:
    """The middleware that lets only authenticated callers past (see the module).

    Args:
        authenticator: What is accepted; one with nothing configured lets callers in
            anonymously (the server checked that it may: :func:`producer_lib.auth.check_exposure`).
        insecure: ``--insecure``: an anonymous server accepts any ``Host`` header.
    """
    public = _PUBLIC | ({"/metrics"} if authenticator.anonymous_metrics else set())
    anonymous = not authenticator.configured

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in public:
            return await handler(request)
        if anonymous:
            refusal = _browser_refusal(request, check_host=not insecure)
            if refusal is not None:
                request[REFUSED] = refusal
                return json_response(403, {"error": "forbidden: " + refusal})
            request[CALLER] = ANONYMOUS
            return await handler(request)
        try:
            request[CALLER] = await _authenticate(authenticator, request)
        except Unauthorized as exc:
            request[REFUSED] = exc.reason
            return _unauthorized(authenticator)
        except AuthUnavailable:
            request[REFUSED] = "signing keys unavailable"
            body = {"error": "credentials cannot be checked now; retry later"}
            return json_response(503, body, {"Retry-After": _RETRY_AFTER_S})
        return await handler(request)

    return middleware


async def _authenticate(authenticator: Authenticator, request: web.Request) -> Caller:
    if "Authorization" in request.headers:  # a token may need the tenant's keys: network
        return await asyncio.to_thread(authenticator.authenticate, request.headers, request.query)
    return authenticator.authenticate(request.headers, request.query)


def _unauthorized(authenticator: Authenticator) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if authenticator.entra is not None else None
    return json_response(401, {"error": _UNAUTHORIZED}, headers)


def _browser_refusal(request: web.Request, check_host: bool) -> str | None:
    """Why a request to a server without authentication looks like a browser's; None: fine."""
    if "Origin" in request.headers:
        return "a web page's request (Origin header) to a server without authentication"
    if request.headers.get("Sec-Fetch-Site", "none") != "none":
        return "a web page's request (Sec-Fetch-Site) to a server without authentication"
    if check_host and not is_loopback(_host_name(request.host or "")):
        return "Host is not a loopback name; a server without authentication answers only those"
    return None


def _host_name(host: str) -> str:
    """The name of a ``Host`` header without its port: ``[::1]:80`` -> ``::1``."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class AccessLogger(AbstractAccessLogger):
    """One line per request: method, path (no query), status, time, caller, refusal reason."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Log the request (probes that succeeded at debug level)."""
        path = _printable(request.raw_path.split("?", 1)[0])[:200]
        caller = request.get(CALLER)
        level = logging.DEBUG if path in _QUIET and response.status < 400 else logging.INFO
        self.logger.log(
            level,
            "http method=%s path=%s status=%d duration_s=%.3f remote=%s caller=%s%s",
            _printable(request.method)[:16],
            path,
            response.status,
            time,
            request.remote,
            f"{caller.method}:{caller.subject}" if isinstance(caller, Caller) else "-",
            f" refused={request[REFUSED]!r}" if REFUSED in request else "",
        )

    @property
    def enabled(self) -> bool:
        """Log when the logger takes INFO lines (no formatting work otherwise)."""
        return self.logger.isEnabledFor(logging.INFO)


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
