"""``producer-lib serve`` tried as an attacker would (issue 48): a real server process on a
loopback port, keys for two functions and a host key, a stand-in Entra ID tenant publishing a
key the test made, a flow that records every load it starts, and the real broker.

Every answer must be the documented status code (docs/SERVING.md), no refused request may
start a load or leave an ``_execution_log`` record, and the server must still serve after.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from tests.support.consume import consume_all
from tests.support.entra import AUDIENCE, Tenant, new_key, running_tenant
from tests.support.ports import free_port_block

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[3]
KEY_A1, KEY_A2 = "a1-" + uuid.uuid4().hex * 2, "a2-" + uuid.uuid4().hex * 2
KEY_B = "b-" + uuid.uuid4().hex * 2  # the key of another function
HOST_KEY = "host-" + uuid.uuid4().hex * 2
WRONG_KEY = "wrong-" + uuid.uuid4().hex * 2
_OWN_PREFIXES = ("KAFKA_", "SCHEMA_REGISTRY_", "FLOW_", "AZURE_", "SECRET_", "GUARD_TEST_")


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Server:
    port: int
    function: str
    record: Path
    gate: Path
    log: Path
    bootstrap: str
    tenant: Tenant

    def call(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        timeout: float = 60,
    ) -> Answer:
        """One request, the path sent exactly as given (no client-side normalisation)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            chunked = body is not None and not isinstance(body, bytes)
            connection.request(
                method, path, body=body, headers=headers or {}, encode_chunked=chunked
            )
            response = connection.getresponse()
            return Answer(response.status, dict(response.headers), response.read())
        finally:
            connection.close()

    def loads(self) -> list[str]:
        """The loads the flow started so far (one line each)."""
        return self.record.read_text().splitlines() if self.record.exists() else []

    def logged_runs(self, dataflow: str) -> list[dict]:
        key = f"{self.function}|{dataflow}|0".encode()
        records = consume_all(self.bootstrap, EXECUTION_LOG_TOPIC)
        return [json.loads(m.value()) for m in records if m.key() == key]


@pytest.fixture(scope="module")
def tenant() -> Iterator[Tenant]:
    with running_tenant() as tenant:
        yield tenant


@pytest.fixture(scope="module")
def server(tenant, kafka_bootstrap, tmp_path_factory) -> Iterator[Server]:
    """``producer-lib serve`` of function A with keys for A and B, a host key and Entra ID."""
    root = tmp_path_factory.mktemp("serve_attacks")
    function = f"guard_a_{uuid.uuid4().hex[:8]}"
    port = free_port_block(1)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)},
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "GUARD_TEST_FUNCTION": function,
        "GUARD_TEST_RECORD": str(root / "loads.txt"),
        "GUARD_TEST_GATE": str(root / "gate"),
        "FLOW_AUTH_FUNCTION_KEYS": json.dumps({function: [KEY_A1, KEY_A2], "guard_b": KEY_B}),
        "FLOW_AUTH_HOST_KEYS": HOST_KEY,
        **tenant.settings(),
        "FLOW_MAX_CONCURRENT_RUNS": "2",
        "FLOW_HTTP_WAIT_S": "60",
    }
    log_path = root / "serve.log"
    command = [str(Path(sys.executable).parent / "producer-lib"), "serve"]
    command += ["tests.support.runner_flows:RecordingFlow", "--port", str(port)]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    server = Server(
        port, function, root / "loads.txt", root / "gate", log_path, kafka_bootstrap, tenant
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert server.call("GET", "/health").status == 200
                break
            except OSError:
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "producer-lib serve did not start"
                time.sleep(0.2)
        yield server
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def key(value: str) -> dict[str, str]:
    return {"x-functions-key": value}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def run_path(dataflow: str, load: str = "initial") -> str:
    return f"/run?load={load}&dataflow={dataflow}"


def assert_unauthorized(answer: Answer) -> None:
    assert answer.status == 401, answer
    assert answer.json() == {
        "error": "unauthorized: send a function key (x-functions-key header or code parameter) "
        "or an Entra ID access token (Authorization: Bearer)"
    }
    assert answer.headers["WWW-Authenticate"] == "Bearer"


# -- who gets in ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/run?load=initial"),
        ("GET", "/run?load=initial"),
        ("PUT", "/run"),
        ("GET", f"/runs/{uuid.uuid4()}"),
        ("GET", "/runs/../../etc/passwd"),
        ("GET", "/metrics"),
        ("GET", "/no-such-route"),
    ],
)
def test_no_credentials_get_401_on_every_route_but_health(server, method, path):
    before = server.loads()
    assert_unauthorized(server.call(method, path))
    assert server.loads() == before


def test_health_is_anonymous_and_tells_no_run_id(server):
    answer = server.call("GET", "/health")
    assert answer.status == 200
    assert answer.json() == {"status": "ok", "function_name": server.function, "running": []}


def refused_credentials(server: Server) -> dict[str, dict[str, str]]:
    tenant, now = server.tenant, int(time.time())
    return {
        "wrong-key": key(WRONG_KEY),
        "other-function-key": key(KEY_B),
        "other-function-key-as-code": {},  # sent as ?code= below
        "key-prefix": key(KEY_A1[:-1]),
        "expired-token": bearer(tenant.token(exp=now - 600, nbf=now - 1200)),
        "forged-token": bearer(tenant.token(key=new_key())),  # same kid, another key
        "wrong-audience": bearer(tenant.token(aud="api://another-api")),
        "wrong-issuer": bearer(tenant.token(iss="https://login.microsoftonline.com/x/v2.0")),
        "no-role": bearer(tenant.token(roles=[])),
        "unknown-kid": bearer(tenant.token(kid="kid-made-up")),
        "basic-auth": {"Authorization": f"Basic {KEY_A1}"},
        "right-key-wrong-token": {**key(KEY_A1), **bearer(tenant.token(aud="api://other"))},
    }


@pytest.mark.parametrize(
    "case",
    [
        "wrong-key",
        "other-function-key",
        "other-function-key-as-code",
        "key-prefix",
        "expired-token",
        "forged-token",
        "wrong-audience",
        "wrong-issuer",
        "no-role",
        "unknown-kid",
        "basic-auth",
        "right-key-wrong-token",
    ],
)
def test_a_refused_credential_starts_nothing(server, case):
    headers = refused_credentials(server)[case]
    dataflow = f"refused_{case}"
    path = run_path(dataflow) + (f"&code={KEY_B}" if case.endswith("as-code") else "")
    before = server.loads()
    assert_unauthorized(server.call("POST", path, headers))
    assert server.loads() == before


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_function_keys_host_keys_and_tokens_start_a_load(server):
    accepted = {
        "function-key": (run_path("ok_key"), key(KEY_A1)),
        "second-function-key": (run_path("ok_key2") + f"&code={KEY_A2}", {}),
        "host-key": (run_path("ok_host"), key(HOST_KEY)),
        "token-v2": (run_path("ok_v2"), bearer(server.tenant.token())),
        "token-v1": (run_path("ok_v1"), bearer(server.tenant.token(iss=server.tenant.v1_issuer))),
    }
    for case, (path, headers) in accepted.items():
        answer = server.call("POST", path, headers)
        assert answer.status == 200, (case, answer)
        assert answer.json()["status"] == "COMPLETED"
        dataflow = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["dataflow"][0]
        assert server.loads()[-1].split()[:2] == ["initial", dataflow]
    assert [r["status"] for r in server.logged_runs("ok_host")] == ["STARTED", "COMPLETED"]


def test_metrics_need_a_credential_and_show_no_run_id(server):
    assert_unauthorized(server.call("GET", "/metrics"))
    answer = server.call("GET", "/metrics", key(HOST_KEY))
    assert answer.status == 200 and b"producer_runs_total" in answer.body
    assert b"run_id" not in answer.body


# -- what a caller with a key still cannot do -----------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
def test_no_method_but_post_starts_a_load(server, method):
    dataflow = f"get_{method.lower()}_{uuid.uuid4().hex[:6]}"
    answer = server.call(method, run_path(dataflow) + f"&code={KEY_A1}")
    assert answer.status == 405
    assert answer.headers["Allow"] == "POST"
    if method != "HEAD":
        assert "use POST" in answer.json()["error"]
    assert not [line for line in server.loads() if dataflow in line]
    assert server.logged_runs(dataflow) == []


def test_an_oversized_body_is_refused_with_413(server):
    before = server.loads()
    big = json.dumps({"load": "initial", "pad": "x" * 100_000}).encode()
    answer = server.call("POST", "/run", key(KEY_A1), big)
    assert answer.status == 413 and "FLOW_MAX_BODY_BYTES" in answer.json()["error"]
    chunks = iter([b'{"load": "initial", "pad": "', *[b"x" * 8192] * 12, b'"}'])
    answer = server.call(
        "POST", "/run", {**key(KEY_A1), "Content-Type": "application/json"}, chunks
    )
    assert answer.status == 413
    assert server.loads() == before
    assert server.call("GET", "/health").status == 200


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/runs/not-a-run-id", 400),
        ("/runs/..%2F..%2Fetc%2Fpasswd", 400),
        ("/runs/%2e%2e", 400),
        (f"/runs/{str(uuid.uuid4()).upper()}", 400),
        (f"/runs/{uuid.uuid4()}%00", 400),
        (f"/runs/{uuid.uuid4()}%0a%0dSet-Cookie:x=1", 400),
        ("/runs/" + "a" * 5000, 400),
        (f"/runs/{uuid.uuid4()}", 404),
        (f"/runs/{uuid.uuid4()}?function=guard_b&dataflow=default&partition=0", 404),
        (f"/runs/{uuid.uuid4()}/../../run", 404),  # dot segments are not resolved: no route
        ("/runs/../run?load=initial", 404),
    ],
    ids=[
        "not-a-uuid",
        "encoded-traversal",
        "encoded-dots",
        "uppercase",
        "nul",
        "crlf",
        "5000-chars",
        "unknown",
        "another-function",
        "dot-dot-to-run",
        "dot-dot-run-with-load",
    ],
)
def test_malformed_run_ids_are_400_unknown_ones_404(server, path, status):
    before = server.loads()
    assert_unauthorized(server.call("GET", path))
    answer = server.call("GET", path, key(KEY_A1))
    assert answer.status == status, answer
    assert b"passwd" not in answer.body and b"Set-Cookie" not in answer.body
    assert "Set-Cookie" not in answer.headers
    assert server.loads() == before


def test_a_run_more_than_the_bound_gets_429_and_the_same_dataflow_409(server):
    answers: dict[str, Answer] = {}

    def start(dataflow: str) -> None:
        answers[dataflow] = server.call("POST", run_path(dataflow), key(KEY_A1))

    threads = [threading.Thread(target=start, args=(f"gated_{i}",)) for i in (1, 2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while len(server.call("GET", "/health").json()["running"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    busy = server.call("POST", run_path("gated_3"), key(KEY_A1))
    assert busy.status == 429 and busy.headers["Retry-After"].isdigit()
    assert "FLOW_MAX_CONCURRENT_RUNS" in busy.json()["error"]
    again = server.call("POST", run_path("gated_1"), key(KEY_A1))
    assert again.status == 409 and "already in progress" in again.json()["error"]
    health = server.call("GET", "/health").json()
    assert health["running"] == [
        {"dataflow": "gated_1", "partition": "0"},
        {"dataflow": "gated_2", "partition": "0"},
    ]
    server.gate.touch()
    for thread in threads:
        thread.join(timeout=60)
    assert [answers[f"gated_{i}"].status for i in (1, 2)] == [200, 200]
    assert not [line for line in server.loads() if "gated_3" in line]


# -- a flood, then business as usual --------------------------------------------------------------


FLOOD = 3000
FLOOD_DEADLINE_S = 120  # the loop stops by itself whatever happens


def test_thousands_of_hostile_requests_then_a_valid_call_still_works(server):
    tenant = server.tenant
    forged = tenant.token(key=new_key())
    expired = tenant.token(exp=int(time.time()) - 600)
    hostile: list[tuple[str, str, dict[str, str], int]] = [
        ("POST", "/run?load=initial", {}, 401),
        ("POST", "/run?load=initial", key(WRONG_KEY), 401),
        ("POST", f"/run?load=initial&code={KEY_B}", {}, 401),
        ("POST", "/run?load=initial", bearer(forged), 401),
        ("POST", "/run?load=initial", bearer(expired), 401),
        ("GET", f"/run?load=initial&code={KEY_A1}", {}, 405),
        ("GET", "/runs/..%2Frun", key(KEY_A1), 400),
        ("GET", "/metrics", {}, 401),
    ]
    fetches = tenant.fetches
    before = server.loads()

    async def flood() -> dict[tuple[int, int], int]:
        seen: dict[tuple[int, int], int] = {}
        deadline = time.monotonic() + FLOOD_DEADLINE_S
        connector = aiohttp.TCPConnector(limit=16)
        async with aiohttp.ClientSession(
            f"http://127.0.0.1:{server.port}", connector=connector
        ) as session:

            async def one(i: int) -> None:
                method, path, headers, expected = hostile[i % len(hostile)]
                if time.monotonic() > deadline:
                    return
                async with session.request(method, path, headers=headers) as response:
                    await response.read()
                    seen[(expected, response.status)] = seen.get((expected, response.status), 0) + 1

            for start in range(0, FLOOD, 200):
                await asyncio.gather(*(one(i) for i in range(start, min(start + 200, FLOOD))))
        return seen

    started = time.monotonic()
    seen = asyncio.run(flood())
    elapsed = time.monotonic() - started
    assert sum(seen.values()) == FLOOD, f"only {sum(seen.values())} in {elapsed:.1f} s"
    assert all(expected == got for expected, got in seen), seen
    assert server.loads() == before
    assert tenant.fetches == fetches  # forged and expired tokens name a known kid: no fetch
    print(f"{FLOOD} hostile requests answered in {elapsed:.2f} s")

    assert server.call("GET", "/health").status == 200
    answer = server.call("POST", run_path("after_flood"), key(KEY_A1))
    assert answer.status == 200 and answer.json()["status"] == "COMPLETED"
    assert len(server.loads()) == len(before) + 1


# -- the log ------------------------------------------------------------------------------------


def test_the_log_names_callers_and_reasons_but_never_a_credential(server):
    token = server.tenant.token()
    server.call("POST", run_path("log_check") + f"&code={KEY_A2}")
    server.call("POST", run_path("log_check_token"), bearer(token))
    server.call("POST", run_path("log_refused") + f"&code={WRONG_KEY}")
    time.sleep(0.5)  # the access log line is written after the answer
    log = server.log.read_text()
    for secret in (KEY_A1, KEY_A2, KEY_B, HOST_KEY, WRONG_KEY, token, token.split(".")[2]):
        assert secret not in log
    assert "code=" not in log
    assert "refused='unknown key'" in log
    assert "caller=function_key:function key of" in log and "caller=entra_id:oid=" in log
    assert "Traceback" not in log
    assert f"flow={server.function} function_keys=2 host_keys=1 entra_tenant=" in log
    assert AUDIENCE in log
