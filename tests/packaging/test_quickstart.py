"""README's "Quickstart: your own flow repo", run as written.

The commands are the fenced ``bash`` block under that heading of README.md, so the README and
this test cannot drift. Three substitutions, each of a whole token: the install source (the
wheel built from this repository, at the versions of ``constraints.txt``), the value of
``KAFKA_BOOTSTRAP_SERVERS`` (the test broker) and the topic name (one per run, so that reruns
and other tests on the shared broker do not meet). The block runs under ``bash -euo pipefail``
in an empty folder outside the repository, with a fresh venv and an environment holding
nothing of this repository (no ``PYTHONPATH``, no ``VIRTUAL_ENV``); the writer resolves its
jars with Maven as a user's would (into a folder of this test). Then DuckDB's printout must
show the three rows.

Then, in the same folder and venv, the README's commands that follow the quickstart: "Watch
the writer" (``lakehouse-writer status`` on the quickstart's relative paths) and "Run a flow in
a container" (``producer-lib serve``, on a free port instead of 8080, until ``GET /health``
answers), and ``--version`` of both commands: the version the wheel was built with.

Slow: it installs pyspark into a fresh venv (a few minutes, with a warm pip cache) and runs
Spark once.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.packaging.test_wheel import (  # noqa: F401 - wheel is a fixture
    REPO,
    _clean_env,
    expected_version,
    wheel,
)

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark]

HEADING = "## Quickstart: your own flow repo"
STATUS_HEADING = "## Watch the writer"
SERVE_HEADING = "## Run a flow in a container"
SERVE = "producer-lib serve flow:CitiesFlow --port 8080"
INSTALL = "pip install 'flow-platform[producer,writer]'"
BOOTSTRAP = re.compile(r"^export KAFKA_BOOTSTRAP_SERVERS=\S+$", re.M)
TOPIC = "quickstart_cities"


def readme_block(heading: str = HEADING) -> str:
    """The first fenced ``bash`` block of a section of README.md (the quickstart's)."""
    text = (REPO / "README.md").read_text()
    assert text.count(heading) == 1, f"README.md has no single {heading!r} section"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```bash\n(.*?)^```$", section, re.S | re.M)
    assert found, f"no ```bash block under {heading!r}"
    return found.group(1)


def substituted(block: str, wheel_path: Path, bootstrap: str, topic: str) -> str:
    """The block with the install source, the cluster and the topic of this run."""
    assert block.count(INSTALL) == 1, f"the install step changed; expected {INSTALL!r}"
    assert len(BOOTSTRAP.findall(block)) == 1, "expected one export KAFKA_BOOTSTRAP_SERVERS=..."
    assert block.count(TOPIC) >= 2, f"flow and writer should both name the topic {TOPIC}"
    local_install = f"pip install -q -c {REPO / 'constraints.txt'} '{wheel_path}[producer,writer]'"
    block = block.replace(INSTALL, local_install)
    block = BOOTSTRAP.sub(f"export KAFKA_BOOTSTRAP_SERVERS={bootstrap}", block)
    return re.sub(rf"\b{TOPIC}\b", topic, block)


def test_the_block_has_six_steps() -> None:
    """Six commands: the two heredocs count as one step each."""
    block = readme_block()
    body = re.sub(r"<<'(\w+)'\n.*?^\1$", "<<heredoc", block, flags=re.S | re.M)
    steps = [line for line in body.splitlines() if line.strip() and not line.startswith(" ")]
    assert len(steps) == 6, steps


def test_the_readme_quickstart_runs_as_written(
    wheel: Path,  # noqa: F811 - the fixture of test_wheel
    tmp_path: Path,
    kafka_bootstrap: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    work = tmp_path / "my_flows"
    work.mkdir()
    topic = f"t_quickstart_{uuid.uuid4().hex[:8]}"
    script = "set -euo pipefail\n" + substituted(readme_block(), wheel, kafka_bootstrap, topic)
    base_python = Path(getattr(sys, "_base_executable", sys.executable))
    shims = tmp_path / "bin"  # `python3` is the interpreter of the tests, not this repo's venv
    shims.mkdir()
    (shims / "python3").symlink_to(base_python)
    env = _clean_env(
        {
            "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
            "LAKEHOUSE_JARS_DIR": str(tmp_path / "jars"),
            "HOME": os.environ.get("HOME", str(tmp_path)),
        }
    )
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # the block's export is what counts

    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=1500
    )
    elapsed = time.monotonic() - started

    with capsys.disabled():
        print(f"\nREADME quickstart ran in {elapsed:.0f} s (exit {done.returncode})")
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    printed = done.stdout
    rows = re.findall(r"│\s*(\d+)\s*│\s*(\w+)\s*│", printed)
    assert rows == [("1", "Oslo"), ("2", "Lima"), ("3", "Pune")], printed
    installed = subprocess.run(
        [str(work / ".venv" / "bin" / "python"), "-c", "import devstack"],
        capture_output=True,
        env=_clean_env(),
        cwd=work,
    )
    assert installed.returncode != 0, "the quickstart's venv must not reach this repository"
    assert sorted(p.name for p in (tmp_path / "jars").glob("*.jar")), "jars not resolved there"

    venv_env = {
        **env,
        "PATH": f"{work / '.venv' / 'bin'}{os.pathsep}{env['PATH']}",
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
    }
    _the_commands_after_the_quickstart(work, venv_env)


def _the_commands_after_the_quickstart(work: Path, env: dict[str, str]) -> None:
    """The README's status and serve blocks, and ``--version``, in the quickstart's folder."""
    status = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_block(STATUS_HEADING)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "state: drained" in status.stdout, status.stdout

    assert readme_block(SERVE_HEADING).strip() == SERVE, "the serve command changed"
    port = _free_port()
    server = subprocess.Popen(
        ["bash", "-c", "exec " + SERVE.replace("--port 8080", f"--port {port}")],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        health = _wait_for_health(f"http://127.0.0.1:{port}/health", server)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert health == 200

    for command in ("producer-lib", "lakehouse-writer"):
        said = subprocess.run(
            [command, "--version"], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )
        assert said.stdout == f"{command} {expected_version()}\n", said.stdout + said.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_health(url: str, server: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            if server.poll() is not None:
                stderr = server.stderr.read() if server.stderr else ""
                pytest.fail(f"producer-lib serve exited {server.returncode}: {stderr}")
            assert time.monotonic() < deadline, "producer-lib serve did not answer /health"
            time.sleep(0.5)
