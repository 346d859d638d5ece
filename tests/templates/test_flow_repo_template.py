"""The flow-repo template deploys: its function app (with the real ``azure.functions`` objects,
against the real broker), host.json, local settings, .dockerignore and Dockerfile, and its
image when a container engine is present."""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path
from types import ModuleType

import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest

from tests.support.ports import free_port_block

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "flow_repo"


def load_function_app(monkeypatch, **env: str) -> dict:
    """Import the template's function_app.py as the Functions host indexes it."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location(
        f"function_app_{uuid.uuid4().hex}", TEMPLATE / "function_app.py"
    )
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {f.get_function_name(): f for f in module.app.get_functions()}


@pytest.fixture
def numbers_flow(monkeypatch, kafka_bootstrap, new_topic) -> dict:
    topic = new_topic()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNNER_TEST_TOPIC": topic,
        "RUNNER_TEST_FUNCTION": f"tmpl_{uuid.uuid4().hex[:8]}",
        "FLOW_RUNNER": "tests.support.runner_flows:NumbersFlow",
    }
    monkeypatch.delenv("FLOW_TIMER_SCHEDULE", raising=False)
    return env


# -- function_app.py -------------------------------------------------------------------------


@pytest.mark.kafka
def test_function_app_runs_a_load_answers_202_and_serves_its_status(
    monkeypatch, numbers_flow, tmp_path
):
    functions = load_function_app(monkeypatch, **numbers_flow)
    assert set(functions) == {"run", "run_status", "health"}  # no timer unless opted in
    run = functions["run"].get_user_function()
    status_fn = functions["run_status"].get_user_function()
    routes = {
        name: binding.get_dict_repr()["route"]
        for name, f in functions.items()
        for binding in f.get_bindings()
        if binding.type == "httpTrigger"
    }
    assert routes == {"run": "run", "run_status": "runs/{run_id}", "health": "health"}
    methods = {
        name: [str(m).split(".")[-1].upper() for m in binding.get_dict_repr()["methods"]]
        for name, f in functions.items()
        for binding in f.get_bindings()
        if binding.type == "httpTrigger"
    }
    assert methods["run"] == ["POST"]  # no GET starts a load

    health = functions["health"].get_user_function()(
        func.HttpRequest("GET", "/api/health", body=b"")
    )
    assert health.status_code == 200

    url = "https://flow.azurewebsites.net/api/run"
    first = asyncio.run(run(func.HttpRequest("POST", url, params={"load": "initial"}, body=b"")))
    assert first.status_code == 200
    assert json.loads(first.get_body())["rows"] == {"TEST.NUMBERS": 11}

    gate = tmp_path / "gate"
    monkeypatch.setenv("RUNNER_TEST_GATE", str(gate))  # the delta load waits for this file
    monkeypatch.setenv("FLOW_HTTP_WAIT_S", "1")

    async def long_delta() -> dict:
        answer = await run(func.HttpRequest("POST", url, params={"load": "delta"}, body=b""))
        body = json.loads(answer.get_body())
        assert answer.status_code == 202 and answer.headers["Location"] == body["status_url"]
        parts = urllib.parse.urlsplit(body["status_url"])
        assert parts.netloc == "flow.azurewebsites.net"
        assert parts.path == f"/api/runs/{body['run_id']}"
        poll = func.HttpRequest(
            "GET",
            body["status_url"],
            body=b"",
            route_params={"run_id": body["run_id"]},
            params=dict(urllib.parse.parse_qsl(parts.query)),
        )
        assert json.loads((await status_fn(poll)).get_body())["status"] == "RUNNING"
        gate.touch()
        for _ in range(600):
            state = json.loads((await status_fn(poll)).get_body())
            if state["status"] != "RUNNING":
                return state
            await asyncio.sleep(0.1)
        raise AssertionError("the run never finished")

    state = asyncio.run(long_delta())
    assert (state["status"], state["rows"], state["delta_pointer"]) == (
        "COMPLETED",
        {"TEST.NUMBERS": 5},
        14,
    )


@pytest.mark.kafka
def test_the_timer_is_opt_in_and_runs_a_delta_load(monkeypatch, numbers_flow):
    functions = load_function_app(monkeypatch, **numbers_flow, FLOW_TIMER_SCHEDULE="0 */5 * * * *")
    assert set(functions) == {"run", "run_status", "health", "scheduled_delta"}
    binding = functions["scheduled_delta"].get_bindings()[0].get_dict_repr()
    assert (binding["type"], binding["schedule"]) == ("timerTrigger", "0 */5 * * * *")
    timer = functions["scheduled_delta"].get_user_function()
    asyncio.run(timer(TimerRequest()))  # first run: no pointer yet, so the initial load
    asyncio.run(timer(TimerRequest()))  # then the delta load
    from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
    from tests.support.consume import consume_all

    key = f"{numbers_flow['RUNNER_TEST_FUNCTION']}|default|0".encode()
    records = consume_all(numbers_flow["KAFKA_BOOTSTRAP_SERVERS"], EXECUTION_LOG_TOPIC)
    logged = [json.loads(m.value()) for m in records if m.key() == key]
    assert [r["load"] for r in logged if r["status"] == "COMPLETED"] == ["initial", "delta"]
    assert logged[-1]["delta_pointer"] == 14


def test_log_format_json_gives_the_hosts_handlers_json_lines(monkeypatch, numbers_flow, caplog):
    """The Functions worker owns the root logger's handlers; LOG_FORMAT=json formats them."""
    root = logging.getLogger()
    level, formatter = root.level, caplog.handler.formatter
    try:
        load_function_app(monkeypatch, **numbers_flow, LOG_FORMAT="json", LOG_LEVEL="INFO")
        logging.getLogger("my_flows.orders").info("loaded table=SHOP.ORDERS rows=3")
    finally:
        root.setLevel(level)
        caplog.handler.setFormatter(formatter)
    line = json.loads(caplog.text.strip().splitlines()[-1])
    assert line["message"] == "loaded table=SHOP.ORDERS rows=3" and line["table"] == "SHOP.ORDERS"
    assert line["level"] == "INFO" and line["logger"] == "my_flows.orders"


# -- host.json, local.settings.json.example ----------------------------------------------


def _timeout_minutes(value: str) -> float:
    hours, minutes, seconds = (int(part) for part in value.split(":"))
    return hours * 60 + minutes + seconds / 60


def test_host_json_is_a_functions_v4_host_that_fits_the_consumption_plan():
    host = json.loads((TEMPLATE / "host.json").read_text())
    assert host["version"] == "2.0"
    assert host["extensionBundle"]["id"] == "Microsoft.Azure.Functions.ExtensionBundle"
    assert re.fullmatch(r"\[4\.\*, 5\.0\.0\)", host["extensionBundle"]["version"])
    assert 0 < _timeout_minutes(host["functionTimeout"]) <= 10  # Consumption's maximum
    assert host["extensions"]["http"]["routePrefix"] == "api"  # status URLs sit under /api
    readme = (TEMPLATE / "README.md").read_text()
    for fact in (
        "230 s",
        "functionTimeout",
        "FLOW_HTTP_WAIT_S",
        "202",
        "runs/{run_id}",
        "FLOW_TIMER_SCHEDULE",
        "Container Apps",
        "producer-lib serve",
        "FLOW_AUTH_FUNCTION_KEYS",
        "FLOW_AUTH_ENTRA_TENANT_ID",
        "--insecure",
    ):
        assert fact in readme, fact


def test_local_settings_example_names_every_setting_and_holds_no_secret():
    settings = json.loads((TEMPLATE / "local.settings.json.example").read_text())
    values = settings["Values"]
    assert settings["IsEncrypted"] is False
    assert values["FUNCTIONS_WORKER_RUNTIME"] == "python"
    for name in (
        "AzureWebJobsStorage",
        "KAFKA_BOOTSTRAP_SERVERS",
        "FLOW_ENVIRONMENT",
        "FLOW_RUNNER",
        "FLOW_HTTP_WAIT_S",
        "FLOW_TIMER_SCHEDULE",
        "LOG_FORMAT",
    ):
        assert name in values, name
    secrets = {k: v for k, v in values.items() if k.startswith("SECRET_")}
    assert secrets and all(v.startswith("<") and "placeholder" in v for v in secrets.values())
    assert "AZURE_KEY_VAULT_URL" not in values  # commented out: environment variables first
    assert "#AZURE_KEY_VAULT_URL" in values


# -- .dockerignore and Dockerfile ---------------------------------------------------------


def _docker_regex(pattern: str) -> str:
    """A ``.dockerignore`` pattern (Go ``filepath.Match`` plus ``**``) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] in "*?":
            out, i = out + ("[^/]*" if pattern[i] == "*" else "[^/]"), i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def docker_ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the build context (the last matching rule wins;
    a rule that matches a directory matches everything in it)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate, pattern = raw.startswith("!"), raw.lstrip("!").strip("/")
        if any(re.fullmatch(_docker_regex(pattern), c) for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_what_the_dockerfile_copies_and_drops_local_state():
    patterns = [
        line.strip()
        for line in (TEMPLATE / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    kept_paths = (
        "wheels/flow_platform-0.1.0-py3-none-any.whl",
        "wheels/README.md",
        "requirements.txt",
        "function_app.py",
        "host.json",
        "my_flows/orders.py",
    )
    for kept in kept_paths:
        assert not docker_ignored(kept, patterns), kept
    for dropped in (
        "local.settings.json",
        ".env",
        ".venv/bin/python",
        ".git/HEAD",
        "my_flows/__pycache__/orders.cpython-311.pyc",
    ):
        assert docker_ignored(dropped, patterns), dropped


def test_dockerfile_installs_from_wheels_without_git_and_puts_the_repo_on_the_path():
    dockerfile = (TEMPLATE / "Dockerfile").read_text()
    instructions = [line for line in dockerfile.splitlines() if line and not line.startswith("#")]
    text = "\n".join(instructions)
    assert "git" not in text.lower()
    workdir = re.search(r"^WORKDIR (\S+)", text, re.M)
    assert workdir and re.search(rf"PYTHONPATH={re.escape(workdir.group(1))}\b", text)
    copies = [line for line in instructions if line.startswith(("COPY", "RUN pip"))]
    assert copies.index("COPY wheels/ wheels/") < copies.index(
        "RUN pip install -r requirements.txt"
    )
    requirements = (TEMPLATE / "requirements.txt").read_text()
    assert "--find-links wheels" in requirements and "git+" not in requirements


def _container_engine() -> str | None:
    """Why there is no usable container engine, or None when ``docker`` works."""
    if shutil.which("docker") is None:
        return "no docker executable on PATH"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return f"docker info failed: {(info.stderr or info.stdout).strip().splitlines()[-1:]}"
    return None


@pytest.mark.slow
def test_the_template_image_builds_and_imports_the_flow_repo(tmp_path):
    reason = _container_engine()
    if reason is not None:
        print(f"SKIPPED image build: {reason}")
        pytest.skip(f"no container engine to build the template image: {reason}")
    repo = tmp_path / "flow_repo"
    shutil.copytree(TEMPLATE, repo, ignore=shutil.ignore_patterns("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(repo / "wheels"), str(REPO)],
        check=True,
        capture_output=True,
    )
    (repo / "my_flows").mkdir()
    (repo / "my_flows" / "__init__.py").write_text("")
    (repo / "my_flows" / "orders.py").write_text(
        "from producer_lib import FunctionRunner\n\n\nclass OrdersFlow(FunctionRunner):\n"
        "    function_name = 'orders'\n"
    )
    tag = f"flow-repo-template-test:{uuid.uuid4().hex[:8]}"
    build = subprocess.run(
        ["docker", "build", "-t", tag, str(repo)], capture_output=True, text=True, timeout=1800
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    try:
        probe = (
            "import os; os.chdir('/'); from producer_lib.cli import load_runner; "
            "print(load_runner(os.environ['FLOW_RUNNER']).function_name)\n"
            "try:\n import pyspark\nexcept ImportError:\n print('no spark')"
        )
        out = subprocess.run(
            ["docker", "run", "--rm", tag, "python", "-c", probe],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.split() == ["orders", "no", "spark"]
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)


# -- the image's command: authentication on -------------------------------------------------


def _image_command() -> str:
    """The shell line of the Dockerfile's ``CMD ["sh", "-c", "..."]``."""
    dockerfile = (TEMPLATE / "Dockerfile").read_text()
    cmd = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert len(cmd) == 1
    command = json.loads(cmd[0].removeprefix("CMD "))
    assert command[:2] == ["sh", "-c"]
    return command[2]


def _http(port: int, method: str, path: str, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_the_image_serves_all_addresses_only_with_authentication_on(tmp_path):
    """The Dockerfile's own command, run here with /app and the port swapped for local ones."""
    line = _image_command()
    instructions = [
        row for row in (TEMPLATE / "Dockerfile").read_text().splitlines() if not row.startswith("#")
    ]
    assert "--host 0.0.0.0" in line and "--insecure" not in "\n".join(instructions)
    port = free_port_block(1)
    line = line.replace("--app-dir /app", f"--app-dir {REPO}").replace(
        "--port 8080", f"--port {port}"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FLOW_", "SECRET_", "AZURE_"))},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "FLOW_RUNNER": "tests.support.runner_flows:RecordingFlow",
        "GUARD_TEST_FUNCTION": "orders",
        "GUARD_TEST_RECORD": str(tmp_path / "loads.txt"),
    }
    refused = subprocess.run(
        ["sh", "-c", line], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "refusing to serve on 0.0.0.0 without authentication" in refused.stderr
    assert "FLOW_AUTH_FUNCTION_KEYS" in refused.stderr

    key = secrets.token_urlsafe(32)
    env["FLOW_AUTH_FUNCTION_KEYS"] = json.dumps({"orders": [key]})
    server = subprocess.Popen(
        ["sh", "-c", line], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = _http(port, "GET", "/health", {})
                break
            except OSError:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "the image's command did not start"
                time.sleep(0.2)
        assert health in (200, 503)  # anonymous; 503 here: no Kafka settings
        assert _http(port, "POST", "/run?load=initial", {}) == 401
        assert _http(port, "POST", "/run?load=initial", {"x-functions-key": "x" * 40}) == 401
        assert _http(port, "GET", "/run?load=initial", {"x-functions-key": key}) == 405
    finally:
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=30)[0].decode()
    assert key not in output and not (tmp_path / "loads.txt").exists()
