"""``producer-lib run MODULE:CLASS`` finds the flow repo's own modules (``--app-dir``, default .).

The flow needs ``KAFKA_BOOTSTRAP_SERVERS``, which is unset here: a run that got as far as
asking for it proves the module was imported (instead of ``No module named ...``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FLOW = """
from producer_lib import FunctionRunner


class Flow(FunctionRunner):
    function_name = "app_dir_flow"

    async def initial_load(self, producer, reader):
        raise AssertionError("no Kafka settings: the load must not start")
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A flow repo: one module at its top level, not installed."""
    root = tmp_path / "my_flow_repo"
    root.mkdir()
    (root / "my_own_flow.py").write_text(FLOW)
    return root


def _run(cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "FLOW_"))}
    command = [
        str(Path(sys.executable).parent / "producer-lib"),
        "run",
        "my_own_flow:Flow",
        "--load",
        "initial",
        *extra,
    ]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("where", "extra"),
    [
        pytest.param(".", (), id="current-directory"),
        pytest.param("..", ("--app-dir", "my_flow_repo"), id="app-dir"),
    ],
)
def test_run_imports_the_flow_of_the_app_dir(repo, where, extra):
    done = _run((repo / where).resolve(), *extra)
    assert "No module named" not in done.stderr
    assert done.returncode == 2 and "KAFKA_BOOTSTRAP_SERVERS is not set" in done.stderr, done.stderr


def test_missing_app_dir_is_named(repo):
    done = _run(repo, "--app-dir", "nowhere")
    assert done.returncode == 2 and "app directory does not exist" in done.stderr
    assert "nowhere" in done.stderr
