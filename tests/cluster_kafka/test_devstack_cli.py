"""`devstack up|status|env --brokers 3` on the session's cluster (its home and base port)."""

from __future__ import annotations

import pytest

from devstack import cluster
from devstack.cli import EXIT_NOT_RUNNING, main
from devstack.cluster import ClusterLayout

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def cluster_home(kafka_cluster: ClusterLayout, monkeypatch: pytest.MonkeyPatch) -> ClusterLayout:
    """devstack's settings pointing at the session's cluster (``<home>/kafka-cluster``)."""
    monkeypatch.setenv("DEVSTACK_HOME", str(kafka_cluster.root.parent))
    monkeypatch.setenv("DEVSTACK_CLUSTER_PORT", str(kafka_cluster.base_port))
    assert ClusterLayout.default() == kafka_cluster
    return kafka_cluster


def test_up_status_env_of_the_running_cluster(cluster_home: ClusterLayout, capsys):
    pids = cluster.status(cluster_home)

    assert main(["up", "--brokers", "3"]) == 0
    assert cluster.status(cluster_home) == pids, "a second `up` must reuse the running nodes"
    assert main(["status", "--brokers", "3"]) == 0
    assert main(["env", "--brokers", "3"]) == 0

    out = capsys.readouterr().out
    assert f"kafka cluster: already running at {cluster_home.bootstrap}" in out
    for node in cluster_home.nodes:
        pid = pids[node.node_id]
        assert f"kafka cluster node {node.node_id}: running (pid {pid}) at {node.bootstrap}" in out
    assert out.strip().endswith(f"KAFKA_BOOTSTRAP_SERVERS={cluster_home.bootstrap}")


def test_status_names_the_node_that_is_down(cluster_home: ClusterLayout, capsys):
    cluster.kill(cluster_home, 2)

    assert main(["status", "--brokers", "3"]) == EXIT_NOT_RUNNING
    assert f"kafka cluster node 2: not running at {cluster_home.node(2).bootstrap}" in (
        capsys.readouterr().out
    )


def test_down_of_a_cluster_that_does_not_run_touches_nothing(
    kafka_cluster: ClusterLayout, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.setenv("DEVSTACK_HOME", str(tmp_path))
    pids = cluster.status(kafka_cluster)

    assert main(["down", "--brokers", "3"]) == 0

    assert "kafka cluster: was not running" in capsys.readouterr().out
    assert cluster.status(kafka_cluster) == pids
