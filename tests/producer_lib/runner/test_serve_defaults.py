"""``producer-lib serve`` is safe by default: no authentication configured means loopback
only (``--insecure`` to go further, development only), and such a server refuses what a web
browser would send it, so a web page cannot start a load through a developer's browser."""

from __future__ import annotations

import asyncio
import os

import pytest
from aiohttp.test_utils import TestClient, TestServer

from producer_lib.auth import Authenticator, AuthSettings
from producer_lib.cli import main
from producer_lib.runner.serve import build_app
from producer_lib.runner.serve_guard import ServeSettings
from tests.support.runner_flows import RecordingFlow

FLOW = "tests.support.runner_flows:RecordingFlow"


@pytest.fixture
def flow_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in [n for n in os.environ if n.startswith(("FLOW_", "SECRET_", "AZURE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GUARD_TEST_FUNCTION", "defaults_flow")
    monkeypatch.setenv("GUARD_TEST_RECORD", str(tmp_path / "loads.txt"))
    return tmp_path / "loads.txt"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "flows.example"])
def test_serving_beyond_loopback_without_authentication_refuses_to_start(flow_env, capsys, host):
    assert main(["serve", FLOW, "--host", host, "--port", "1"]) == 2
    error = capsys.readouterr().err
    assert f"refusing to serve on {host} without authentication" in error
    for setting in (
        "FLOW_AUTH_FUNCTION_KEYS",
        "FLOW_AUTH_HOST_KEYS",
        "FLOW_AUTH_ENTRA_TENANT_ID",
        "FLOW_AUTH_ENTRA_AUDIENCE",
        "--insecure",
    ):
        assert setting in error
    assert "Traceback" not in error


def test_bad_authentication_settings_refuse_to_start_naming_the_variable(
    flow_env, monkeypatch, capsys
):
    monkeypatch.setenv("FLOW_AUTH_HOST_KEYS", "S3cr3t-short")
    assert main(["serve", FLOW, "--port", "1"]) == 2
    error = capsys.readouterr().err
    assert "FLOW_AUTH_HOST_KEYS: a key is shorter than 16 characters" in error
    assert "S3cr3t" not in error


def test_bad_server_limits_refuse_to_start(flow_env, monkeypatch, capsys):
    monkeypatch.setenv("FLOW_AUTH_HOST_KEYS", "h" * 32)
    monkeypatch.setenv("FLOW_MAX_CONCURRENT_RUNS", "0")
    assert main(["serve", FLOW, "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "FLOW_MAX_CONCURRENT_RUNS" in capsys.readouterr().err


def open_app(insecure: bool = False):
    nobody = Authenticator.from_settings("defaults_flow", AuthSettings())
    return build_app(RecordingFlow(), nobody, ServeSettings(), insecure=insecure)


@pytest.mark.parametrize(
    ("headers", "insecure", "status"),
    [
        ({}, False, 400),  # let in: the bad ``load`` answers 400, no run starts
        ({"Origin": "https://evil.example"}, False, 403),
        ({"Origin": "null"}, False, 403),
        ({"Sec-Fetch-Site": "cross-site"}, False, 403),
        ({"Sec-Fetch-Site": "same-origin"}, False, 403),  # DNS rebinding: same origin to it
        ({"Host": "evil.example"}, False, 403),
        ({"Host": "localhost:8080"}, False, 400),
        ({"Host": "[::1]:8080"}, False, 400),
        ({"Host": "evil.example"}, True, 400),  # --insecure on 0.0.0.0: any Host
        ({"Origin": "https://evil.example"}, True, 403),
    ],
    ids=[
        "curl",
        "origin",
        "origin-null",
        "cross-site",
        "same-origin",
        "rebound-host",
        "localhost",
        "ipv6-loopback",
        "insecure-any-host",
        "insecure-origin",
    ],
)
def test_a_server_without_authentication_refuses_browsers(flow_env, headers, insecure, status):
    async def scenario() -> None:
        async with TestClient(TestServer(open_app(insecure))) as client:
            answer = await client.post("/run", params={"load": "bogus"}, headers=headers)
            assert answer.status == status, await answer.text()
            if status == 403:
                assert (await answer.json())["error"].startswith("forbidden: ")
            health = await client.get("/health", headers=headers)
            assert health.status in (200, 503)  # anonymous always; 503: no Kafka settings

    asyncio.run(scenario())
    assert not flow_env.exists()


def test_a_get_never_starts_a_load_even_without_authentication(flow_env):
    async def scenario() -> None:
        async with TestClient(TestServer(open_app())) as client:
            for method in ("GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"):
                answer = await client.request(method, "/run", params={"load": "initial"})
                assert answer.status == 405 and answer.headers["Allow"] == "POST", method

    asyncio.run(scenario())
    assert not flow_env.exists()
