"""The status page's HTTP server: ``lakehouse-writer ui``.

Routes (GET only):

- ``/``: the page (``static/index.html``); ``/static/<file>``: its script and styles, shipped
  in the package (no CDN: the page works behind firewalls);
- ``/api/overview``: the page's data (:mod:`lakehouse_writer.ops.ui.snapshot`), which the page
  asks for every few seconds;
- ``/health``: ``ok``, for probes.

Who gets in is decided as for ``producer-lib serve`` (:mod:`producer_lib.auth`, settings
``FLOW_AUTH_*``, function name ``lakehouse-writer``): the page and its data need a function
key (``x-functions-key`` header or ``?code=`` in the URL: the page passes it on as the header)
or an Entra ID token (``Authorization: Bearer``); without one: 401, the same body whatever the
reason; 503 while a token cannot be checked. ``/health`` and the static files (the same for
everyone, no data) are open. Without any credential configured the server listens on a
loopback address only (``--insecure`` overrides, for development), and there it refuses what
another web site makes a browser send: a cross-site request (``Sec-Fetch-Site``, ``Origin``)
and, unless ``--insecure``, a ``Host`` that is not a loopback name (DNS rebinding).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from lakehouse_writer.errors import LakehouseWriterError
from producer_lib.auth import Authenticator, is_loopback
from producer_lib.errors import AuthUnavailable, Unauthorized

__all__ = ["FUNCTION_NAME", "UiServer", "UiUnavailable"]

log = logging.getLogger(__name__)

FUNCTION_NAME = "lakehouse-writer"  # whose function keys open the page (FLOW_AUTH_FUNCTION_KEYS)
_STATIC = {  # every file the page has, with its type: nothing else is served from the package
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "plot.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_UNAUTHORIZED = (
    b'{"error": "unauthorized: open the page with ?code=<function key>, or send a key '
    b'(x-functions-key header) or an Entra ID access token (Authorization: Bearer)"}'
)
_HEADERS = {
    # The page loads only its own files and asks only its own server.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a ?code= key never leaves in a Referer
    "Cache-Control": "no-store",
}
_RETRY_AFTER_S = "30"


class UiUnavailable(LakehouseWriterError):
    """The page's server cannot listen where it was told to (a port in use, a bad host)."""


def static_file(name: str) -> bytes:
    """A file of the page, from the package (``lakehouse_writer/ops/ui/static``)."""
    return resources.files("lakehouse_writer.ops.ui").joinpath("static", name).read_bytes()


class UiServer:
    """The page and its data on ``host:port``, on a daemon thread; a context manager.

    Args:
        document: Returns the page's data (a JSON-able dict).
        authenticator: Who may see it; one with nothing configured lets anyone in (the
            caller checked with :func:`producer_lib.auth.check_exposure` that it may).
        host: The address to listen on.
        port: The port (0: any free one; see :attr:`port`).
        insecure: ``--insecure``: an anonymous server answers any ``Host`` header.

    Raises:
        UiUnavailable: The address cannot be listened on (names host and port).
    """

    def __init__(
        self,
        document: Callable[[], dict[str, Any]],
        authenticator: Authenticator,
        host: str = "127.0.0.1",
        port: int = 0,
        insecure: bool = False,
    ) -> None:
        handler = _handler(document, _Gate(authenticator, insecure))
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise UiUnavailable(
                f"the status page cannot listen: {exc.strerror or exc}; pass --port with a "
                "free port",
                host=host,
                port=port,
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="writer-ui", daemon=True
        )

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    def start(self) -> UiServer:
        """Serve on a daemon thread; returns self."""
        self._thread.start()
        log.info("status page served url=http://%s:%d/", *self._server.server_address[:2])
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> UiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Gate:
    """Who may see the page and its data (see the module); answers a refusal or None."""

    def __init__(self, authenticator: Authenticator, insecure: bool) -> None:
        self.authenticator = authenticator
        self.insecure = insecure

    def refusal(
        self, headers: Mapping[str, str], query: Mapping[str, str]
    ) -> tuple[int, bytes, dict[str, str], str] | None:
        """(status, body, headers, reason for the log) of a refusal; None: let in.

        ``headers``: the request's, names in lower case.
        """
        if not self.authenticator.configured:
            reason = self._browser_refusal(headers)
            if reason is None:
                return None
            return 403, json.dumps({"error": f"forbidden: {reason}"}).encode(), {}, reason
        try:
            self.authenticator.authenticate(headers, query)
        except Unauthorized as exc:
            extra = {"WWW-Authenticate": "Bearer"} if self.authenticator.entra else {}
            return 401, _UNAUTHORIZED, extra, exc.reason
        except AuthUnavailable:
            body = b'{"error": "credentials cannot be checked now; retry later"}'
            return 503, body, {"Retry-After": _RETRY_AFTER_S}, "signing keys unavailable"
        return None

    def _browser_refusal(self, headers: Mapping[str, str]) -> str | None:
        site = headers.get("sec-fetch-site", "none")
        if site not in ("none", "same-origin"):
            return "a request from another web site to a server without authentication"
        host = headers.get("host", "")
        origin = headers.get("origin")
        if origin is not None and urllib.parse.urlsplit(origin).netloc != host:
            return "a request from another origin to a server without authentication"
        if not self.insecure and not is_loopback(_host_name(host)):
            return "Host is not a loopback name; a server without authentication answers only those"
        return None


def _host_name(host: str) -> str:
    """The name of a ``Host`` header without its port: ``[::1]:80`` -> ``::1``."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class _Pairs(Mapping[str, str]):
    """Query parameters as a mapping whose ``items()`` keeps repeated names (``?code=a&code=b``)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.pairs = list(pairs)

    def __getitem__(self, key: str) -> str:
        for name, value in self.pairs:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(name for name, _ in self.pairs))

    def __len__(self) -> int:
        return len(dict.fromkeys(name for name, _ in self.pairs))

    def items(self) -> ItemsView[str, str]:
        """Every pair, repeated names included."""
        return _PairItems(self)


class _PairItems(ItemsView[str, str]):
    def __init__(self, pairs: _Pairs) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._pairs.pairs)


def _handler(document: Callable[[], dict[str, Any]], gate: _Gate) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "lakehouse-writer-ui"
        sys_version = ""

        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            started = time.monotonic()
            path, _, query = self.path.partition("?")
            status, reason = self._route(path, _Pairs(urllib.parse.parse_qsl(query)))
            log.log(
                logging.DEBUG if status < 400 else logging.INFO,
                "ui method=GET path=%s status=%d duration_s=%.3f%s",
                _printable(path)[:200],
                status,
                time.monotonic() - started,
                f" refused={reason!r}" if reason else "",
            )

        def _route(self, path: str, query: _Pairs) -> tuple[int, str]:
            if path == "/health":
                return self._send(200, "text/plain; charset=utf-8", b"ok\n")
            if path.startswith("/static/") and path[8:] in _STATIC:
                return self._send(200, _STATIC[path[8:]], static_file(path[8:]))
            if path not in ("/", "/api/overview"):
                return self._send(404, "text/plain; charset=utf-8", b"not found\n")
            headers = _Pairs((name.lower(), value) for name, value in self.headers.items())
            refused = gate.refusal(headers, query)
            if refused is not None:
                status, body, extra, reason = refused
                self._send(status, "application/json", body, extra)
                return status, reason
            if path == "/":
                return self._send(200, _STATIC["index.html"], static_file("index.html"))
            return self._overview()

        def _overview(self) -> tuple[int, str]:
            try:
                body = json.dumps(document()).encode()
            except Exception as exc:  # noqa: BLE001 - the page says what failed, the log why
                log.exception("the status page's data could not be read")
                text = json.dumps({"error": f"the data could not be read: {type(exc).__name__}"})
                return self._send(500, "application/json", text.encode())
            return self._send(200, "application/json", body)

        def _send(
            self, code: int, kind: str, body: bytes, extra: Mapping[str, str] | None = None
        ) -> tuple[int, str]:
            self.send_response(code)
            for name, value in {**_HEADERS, "Content-Type": kind, **(extra or {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return code, ""

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - its name
            pass  # one line per request in do_GET, without the query (``code=`` is a key)

    return Handler


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
