"""`devstack up|down|status|env` on a broker of its own (own home, own port)."""

from __future__ import annotations

import os
import socket

import pytest

from devstack import broker
from devstack.cli import EXIT_NOT_RUNNING, main
from tests.support.ports import free_port_pair

pytestmark = pytest.mark.kafka


@pytest.fixture
def own_stack(tmp_path, monkeypatch):
    """Point devstack at a private home and port; share the Maven jar cache."""
    from devstack import paths

    jars = paths.home() / "jars"
    monkeypatch.setenv("DEVSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("DEVSTACK_KAFKA_PORT", str(free_port_pair()))
    (tmp_path / "jars").symlink_to(jars)
    yield broker.BrokerLayout.default()
    broker.down()


@pytest.mark.slow  # starts and stops a broker of its own
def test_up_twice_status_env_down(own_stack, capsys):
    assert main(["status"]) == EXIT_NOT_RUNNING

    assert main(["up"]) == 0
    first_pid = broker.status()
    assert main(["up"]) == 0
    assert broker.status() == first_pid, "a second `up` must reuse the running broker"
    assert "already running" in capsys.readouterr().out

    assert main(["status"]) == 0
    assert main(["env"]) == 0
    assert (
        capsys.readouterr().out.strip().endswith(f"KAFKA_BOOTSTRAP_SERVERS={own_stack.bootstrap}")
    )

    assert main(["down"]) == 0
    assert broker.status() is None
    assert not os.path.exists(f"/proc/{first_pid}/cmdline") or first_pid != broker.status()
    assert main(["status"]) == EXIT_NOT_RUNNING
    assert main(["down"]) == 0
    assert "was not running" in capsys.readouterr().out


def test_down_leaves_other_processes_alone(own_stack, tmp_path):
    """A stale pid file pointing at a foreign process must not get that process killed."""
    own_stack.root.mkdir(parents=True, exist_ok=True)
    own_stack.pid_file.write_text(f"{os.getpid()}\n")  # this very pytest process

    assert broker.down() is False
    assert not own_stack.pid_file.exists()


def test_up_refuses_a_port_taken_by_someone_else(own_stack, capsys):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", own_stack.port))
        squatter.listen()
        assert main(["up"]) == 1
    err = capsys.readouterr().err
    assert f"Port {own_stack.port}" in err and "DEVSTACK_KAFKA_PORT" in err
    assert broker.status() is None


def test_cluster_ids_never_look_like_options():
    """1 in 64 random ids used to start with '-' and broke `kafka-storage format -t <id>`."""
    ids = {broker.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)
