"""The status page's server tried as an attacker would (issues 44 and 48).

A real server (``UiServer`` over a real, empty lakehouse and checkpoint) on a loopback port;
keys as ``FLOW_AUTH_*`` give them, a stand-in Entra ID tenant publishing a key the test made
(tests/support/entra.py). Every refusal is the documented status with a fixed body that holds no
data; only ``/health`` and the page's own static files are open.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.ops.ui.command import ui_command
from lakehouse_writer.ops.ui.server import FUNCTION_NAME, UiServer
from lakehouse_writer.ops.ui.snapshot import Overview
from lakehouse_writer.settings import LakehouseSettings
from producer_lib.auth import Authenticator, AuthSettings
from producer_lib.errors import ConfigError
from tests.support.entra import new_key, running_tenant
from tests.support.ports import free_port_block

KEY = "ui-" + uuid.uuid4().hex * 2
OTHER_FLOWS_KEY = "flow-" + uuid.uuid4().hex * 2  # a key of another function
WRONG = "wrong-" + uuid.uuid4().hex * 2
DATA_ROUTES = ("/", "/api/overview")


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def call(port: int, path: str, headers: dict[str, str] | None = None) -> Answer:
    """A GET with the path sent exactly as given (no client-side normalisation)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def _settings(tmp_path: Path) -> LakehouseSettings:
    return LakehouseSettings(
        LAKEHOUSE_PATH=str(tmp_path / "lake"), LAKEHOUSE_CHECKPOINT_PATH=str(tmp_path / "ckpt")
    )


@pytest.fixture(scope="module")
def tenant():
    with running_tenant() as tenant:
        yield tenant


@pytest.fixture
def guarded(tmp_path, tenant) -> Iterator[int]:
    """A server that takes the function key of ``lakehouse-writer`` and the tenant's tokens."""
    auth = AuthSettings(
        function_keys=json.dumps({FUNCTION_NAME: KEY, "some_flow": OTHER_FLOWS_KEY}),
        **{k.removeprefix("FLOW_AUTH_").lower(): v for k, v in tenant.settings().items()},
    )
    authenticator = Authenticator.from_settings(FUNCTION_NAME, auth)
    with UiServer(Overview(_settings(tmp_path)).document, authenticator) as server:
        yield server.port


@pytest.fixture
def anonymous(tmp_path) -> Iterator[int]:
    """A server without any credential configured (loopback, as check_exposure allows)."""
    authenticator = Authenticator.from_settings(FUNCTION_NAME, AuthSettings())
    with UiServer(Overview(_settings(tmp_path)).document, authenticator) as server:
        yield server.port


def assert_unauthorized(answer: Answer) -> None:
    assert answer.status == 401, answer
    assert json.loads(answer.body)["error"].startswith("unauthorized")
    assert b"tables" not in answer.body and b"<html" not in answer.body


@pytest.mark.parametrize("path", DATA_ROUTES)
def test_without_a_credential_the_page_and_its_data_are_refused(guarded, path):
    assert_unauthorized(call(guarded, path))


@pytest.mark.parametrize(
    "headers_or_query",
    [
        {"x-functions-key": WRONG},
        {"x-functions-key": OTHER_FLOWS_KEY},  # a key of another function opens nothing here
        "?code=" + WRONG,
        f"?code={KEY}&code={WRONG}",  # every credential a request carries must be valid
        {"x-functions-key": KEY, "Authorization": "Bearer not.a.token"},
        {"Authorization": "Basic " + KEY},
    ],
    ids=[
        "wrong-key",
        "other-functions-key",
        "wrong-code",
        "right-and-wrong-code",
        "bad-token",
        "basic",
    ],
)
def test_a_wrong_credential_gets_the_same_401(guarded, headers_or_query):
    for path in DATA_ROUTES:
        if isinstance(headers_or_query, str):
            answer = call(guarded, path + headers_or_query)
        else:
            answer = call(guarded, path, headers_or_query)
        assert_unauthorized(answer)


def test_forged_expired_and_foreign_tokens_are_refused(guarded, tenant):
    forged = tenant.token(key=new_key())  # signed by a key the tenant never published
    expired = tenant.token(exp=int(time.time()) - 3600, nbf=int(time.time()) - 7200)
    foreign = tenant.token(aud="api://another-app")
    roleless = tenant.token(roles=["Other.Role"])
    for token in (forged, expired, foreign, roleless):
        assert_unauthorized(call(guarded, "/api/overview", {"Authorization": f"Bearer {token}"}))
    answer = call(guarded, "/api/overview", {"Authorization": f"Bearer {tenant.token()}"})
    assert answer.status == 200 and "tables" in json.loads(answer.body)


def test_the_right_key_opens_the_page_and_its_data_as_header_or_code(guarded):
    page = call(guarded, f"/?code={KEY}")
    assert page.status == 200 and b"<main" in page.body
    data = call(guarded, "/api/overview", {"x-functions-key": KEY})
    document = json.loads(data.body)
    assert data.status == 200 and document["tables"] == [] and document["runs"] == []
    assert document["writer"]["state"] == "unknown"  # no status file yet
    assert data.headers["Cache-Control"] == "no-store"
    assert data.headers["Referrer-Policy"] == "no-referrer"  # the ?code= key never leaks
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]


def test_keys_that_cannot_be_checked_now_get_503(guarded, tenant):
    tenant.fail = True
    try:  # this server has fetched no key yet: it must ask the tenant, which fails
        answer = call(guarded, "/api/overview", {"Authorization": f"Bearer {tenant.token()}"})
    finally:
        tenant.fail = False
    assert answer.status == 503, answer
    assert answer.headers["Retry-After"] and b"tables" not in answer.body


@pytest.mark.parametrize(
    "path", ["/health", "/static/app.js", "/static/plot.js", "/static/style.css"]
)
def test_health_and_the_pages_own_files_are_open_and_hold_no_data(guarded, path):
    answer = call(guarded, path)
    assert answer.status == 200
    assert answer.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    [
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/index.html/..",
        "/metrics",
        "/api/overview/",
    ],
)
def test_nothing_else_is_served(guarded, path):
    assert call(guarded, path, {"x-functions-key": KEY}).status == 404


def test_an_anonymous_server_answers_loopback_pages_but_not_other_sites(anonymous):
    assert call(anonymous, "/api/overview").status == 200
    same_origin = {"Sec-Fetch-Site": "same-origin", "Host": f"127.0.0.1:{anonymous}"}
    assert call(anonymous, "/api/overview", same_origin).status == 200
    refused = [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
        {"Host": f"evil.example:{anonymous}"},  # DNS rebinding: the name points at 127.0.0.1
    ]
    for headers in refused:
        answer = call(anonymous, "/api/overview", headers)
        assert answer.status == 403, headers
        assert json.loads(answer.body)["error"].startswith("forbidden")


def test_no_authentication_beyond_loopback_is_refused_unless_insecure(tmp_path, capsys):
    argv = ["ui", "--lakehouse", str(tmp_path / "l"), "--checkpoint", str(tmp_path / "c")]
    assert main([*argv, "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in capsys.readouterr().err

    port, stop = free_port_block(1), threading.Event()

    def serve() -> None:
        ui_command(_settings(tmp_path), lambda: None, "0.0.0.0", port, True, 5.0, stop)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                answer = call(port, "/api/overview", {"Host": "status.example"})
                break
            except OSError:
                time.sleep(0.1)
        assert answer.status == 200  # --insecure: any Host, no credential
    finally:
        stop.set()
        thread.join(30)


def test_check_exposure_refuses_the_page_on_every_interface_without_auth(tmp_path):
    with pytest.raises(ConfigError, match="FLOW_AUTH_FUNCTION_KEYS"):
        ui_command(_settings(tmp_path), lambda: None, "::", 0, False, 5.0, threading.Event())
