"""No secret in anything a failing configuration prints, logs or returns (issue 24, item 1).

Every secret setting holds a distinctive value (all contain ``S3cr3t``) while one setting
is broken; the test then reads every channel a user or an operator sees: the exception's
``str``/``repr`` and a logged traceback, ``producer-lib run`` (a real process), ``producer-lib
serve`` (a real server on a loopback port: ``POST /run``, ``GET /health`` and its own log),
``lakehouse-writer run`` (a real process) and the files it leaves in its checkpoint; with
``LOG_FORMAT=json`` too (the log lines then carry context fields and exception traces).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from uuid import uuid4

import pytest

from producer_lib.auth import AuthSettings
from producer_lib.errors import ConfigError
from producer_lib.logs import JsonFormatter
from producer_lib.settings import (
    KafkaSettings,
    OracleConnectionSettings,
    SchemaRegistrySettings,
)

MARK = "S3cr3t"  # in every secret below; never in any output
SECRETS = {
    "KAFKA_SASL_USERNAME": "kafka-user",
    "KAFKA_SASL_PASSWORD": "S3cr3t-kafka-PW-xyz",
    "KAFKA_OAUTH_TOKEN_ENDPOINT_URL": "https://idp.example/token",
    "KAFKA_OAUTH_CLIENT_SECRET": "S3cr3t-oauth-CS-xyz",
    "KAFKA_OVERRIDES": json.dumps({"ssl.key.password": "S3cr3t-override-PW-xyz"}),
    "SCHEMA_REGISTRY_BASIC_AUTH_USER": "registry-user",
    "SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD": "S3cr3t-registry-PW-xyz",
    "AZURE_CLIENT_SECRET": "S3cr3t-azure-CS-xyz",
    "SECRET_LABWARE_SOURCE": json.dumps(
        {"user": "scott", "password": "S3cr3t-oracle-PW-xyz", "dsn": "db:1521/svc"}
    ),
    "SECRET_STARTEK_SOURCE": "S3cr3t-startek-token-xyz",
}
_OWN_PREFIXES = ("KAFKA_", "SCHEMA_REGISTRY_", "FLOW_", "AZURE_", "SECRET_", "LAKEHOUSE_", "LOG_")

FLOW_MODULE = '''
"""A flow whose reader needs the Labware-Source Oracle secret (as the seed's function_app)."""
from producer_lib import FunctionRunner
from producer_lib.settings import OracleConnectionSettings


class SecretFlow(FunctionRunner):
    function_name = "secret_flow"

    def create_reader(self):
        OracleConnectionSettings("Labware-Source")
        return super().create_reader()

    async def initial_load(self, producer, reader):
        raise AssertionError("the settings are broken: the load must not start")
'''

# (id, settings that break the configuration, what the message must name, the writer reads it)
CASES = [
    pytest.param(  # the report: few settings, so pydantic's input_value is not cut short
        {
            "KAFKA_SASL_MECHANISM": "PLAIN",
            "KAFKA_OAUTH_TOKEN_ENDPOINT_URL": None,
            "KAFKA_OAUTH_CLIENT_SECRET": None,
            "KAFKA_OVERRIDES": None,
        },
        "KAFKA_SASL_MECHANISM=PLAIN needs KAFKA_SECURITY_PROTOCOL",
        True,
        id="kafka-plain-only",
    ),
    pytest.param(
        {"KAFKA_SASL_MECHANISM": "PLAIN"},
        "KAFKA_SASL_MECHANISM=PLAIN needs KAFKA_SECURITY_PROTOCOL",
        True,
        id="kafka-sasl-without-protocol",
    ),
    pytest.param(  # the same, every command logging JSON lines (LOG_FORMAT=json)
        {"KAFKA_SASL_MECHANISM": "PLAIN", "LOG_FORMAT": "json"},
        "KAFKA_SASL_MECHANISM=PLAIN needs KAFKA_SECURITY_PROTOCOL",
        True,
        id="kafka-sasl-without-protocol-json-logs",
    ),
    pytest.param(
        {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER"},
        "KAFKA_OAUTH_CLIENT_ID",
        True,
        id="kafka-oauth-without-client-id",
    ),
    pytest.param(
        {"KAFKA_OVERRIDES": '{"sasl.password": "S3cr3t-override-PW-xyz"'},
        "KAFKA_OVERRIDES is not valid JSON",
        True,
        id="kafka-overrides-not-json",
    ),
    pytest.param(
        {"SCHEMA_REGISTRY_BASIC_AUTH_USER": ""},
        "SCHEMA_REGISTRY_BASIC_AUTH_USER and SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD",
        True,
        id="registry-password-without-user",
    ),
    pytest.param(
        {"SECRET_LABWARE_SOURCE": "scott:S3cr3t-oracle-PW-xyz@db:1521/svc"},
        "SECRET_LABWARE_SOURCE",
        False,
        id="oracle-secret-malformed",
    ),
]


@pytest.fixture
def env(kafka_bootstrap: str, tmp_path: Path) -> dict[str, str]:
    """The environment of the processes: the real broker, every secret, nothing inherited."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
    flow_dir = tmp_path / "flow"
    flow_dir.mkdir()
    (flow_dir / "secretflow.py").write_text(FLOW_MODULE)
    python_path = [str(flow_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **clean,
        **SECRETS,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "PYTHONPATH": os.pathsep.join(python_path),
    }


def _script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http(method: str, url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _producer_run(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_script("producer-lib"), "run", "secretflow:SecretFlow", "--load", "initial"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _serve(env: dict[str, str], cwd: Path, log_path: Path) -> dict[str, tuple[int, str]]:
    """``GET /health`` and ``POST /run`` of a real ``producer-lib serve``; its log to a file."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [
                _script("producer-lib"),
                "serve",
                "secretflow:SecretFlow",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    health = _http("GET", f"{base}/health")
                    break
                except OSError:
                    assert server.poll() is None, log_path.read_text()
                    assert time.monotonic() < deadline, "producer-lib serve did not start"
                    time.sleep(0.2)
            run = _http("POST", f"{base}/run?load=initial")
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
    return {"health": health, "run": run}


def _writer_run(env: dict[str, str], root: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """``lakehouse-writer run --once`` and the text of every file it left in its checkpoint."""
    checkpoint = root / "checkpoint"
    root.mkdir()
    done = subprocess.run(
        [
            _script("lakehouse-writer"),
            "run",
            "--lakehouse",
            str(root / "lake"),
            "--checkpoint",
            str(checkpoint),
            "--once",
            "--topics",  # should the settings pass, read nothing of the shared broker
            f"t_secret_test_{uuid4().hex}",
        ],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
    )
    files = sorted(checkpoint.rglob("*")) if checkpoint.exists() else []
    return done, "\n".join(p.read_text(errors="replace") for p in files if p.is_file())


def _with(env: dict[str, str], broken: dict[str, str | None]) -> dict[str, str]:
    """``env`` with the broken settings applied (None: the variable is unset)."""
    merged = {**env, **broken}
    return {name: value for name, value in merged.items() if value is not None}


@pytest.mark.slow  # runs the producer and the writer as processes, each case
@pytest.mark.parametrize(("broken", "named", "writer_reads_it"), CASES)
def test_no_secret_in_any_output(env, tmp_path, broken, named, writer_reads_it):
    env = _with(env, broken)
    work = tmp_path / "work"
    work.mkdir()
    run = _producer_run(env, work)
    answers = _serve(env, work, tmp_path / "serve.log")
    shown = {
        "run stdout": run.stdout,
        "run stderr": run.stderr,
        "POST /run": answers["run"][1],
        "GET /health": answers["health"][1],
        "serve log": (tmp_path / "serve.log").read_text(),
    }
    if writer_reads_it:
        writer, checkpoint_files = _writer_run(env, tmp_path / "writer")
        shown |= {
            "writer stdout": writer.stdout,
            "writer stderr": writer.stderr,
            "writer checkpoint files": checkpoint_files,
        }

    leaked = {channel: text for channel, text in shown.items() if MARK in text}
    assert not leaked
    assert run.returncode == 2 and named in run.stderr, run.stdout + run.stderr
    status, body = answers["run"]
    assert status == 400 and named in json.loads(body)["error"], body
    status, body = answers["health"]
    if writer_reads_it:  # settings a run reads from the environment: the probe sees them
        assert status == 503 and named in json.loads(body)["error"], body
        assert writer.returncode != 0 and named in writer.stdout + writer.stderr


@pytest.mark.parametrize(("broken", "named", "writer_reads_it"), CASES)
def test_no_secret_in_errors_reprs_or_logs(
    monkeypatch, tmp_path, caplog, broken, named, writer_reads_it
):
    from lakehouse_writer.settings import LakehouseSettings

    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in [n for n in os.environ if n.startswith(_OWN_PREFIXES)]:
        monkeypatch.delenv(name)
    for name, value in _with({**SECRETS, "KAFKA_BOOTSTRAP_SERVERS": "b:9092"}, broken).items():
        monkeypatch.setenv(name, value)
    shown: list[str] = []
    errors: list[ConfigError] = []
    log = logging.getLogger("test_secrets")
    for build in (
        KafkaSettings,
        SchemaRegistrySettings,
        LakehouseSettings,
        lambda: OracleConnectionSettings("Labware-Source"),
    ):
        try:
            shown.append(repr(build()))
        except ConfigError as exc:  # a ValidationError here would fail the test
            errors.append(exc)
            shown += [str(exc), repr(exc)]
            with caplog.at_level(logging.INFO):
                log.exception("settings failed: %s", exc)  # the traceback, chained causes too
    assert any(named in str(e) for e in errors), errors
    shown.append(caplog.text)
    shown += [JsonFormatter().format(record) for record in caplog.records]  # LOG_FORMAT=json
    assert not [text for text in shown if MARK in text]


def test_a_valid_configuration_shows_no_secret_either(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name, value in {
        **SECRETS,
        "KAFKA_BOOTSTRAP_SERVERS": "b:9093",
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "PLAIN",
        "FLOW_AUTH_FUNCTION_KEYS": json.dumps({"flow": "S3cr3t-function-key-xyz"}),
        "FLOW_AUTH_HOST_KEYS": "S3cr3t-host-key-xyz",
    }.items():
        monkeypatch.setenv(name, value)
    from lakehouse_writer.settings import LakehouseSettings

    objects = [
        KafkaSettings(),
        SchemaRegistrySettings(),
        LakehouseSettings(),
        OracleConnectionSettings("Labware-Source"),
        AuthSettings(),
    ]
    shown = [
        text
        for o in objects
        for text in (repr(o), str(o), str(o.model_dump()), o.model_dump_json())
    ]
    assert not [text for text in shown if MARK in text]
