"""A real Spark standalone cluster for the writer: a master and two workers on loopback.

Started from the pyspark distribution of the venv (``spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker spark://...``, one core and 1.5 GiB each), like the broker fixture:
for a test module, in a temp folder, stopped at its end. Each worker runs in its own process
group, so :meth:`SparkCluster.kill_worker` takes its executor along, as a lost machine would.

The writer goes to it the way docs/CLUSTER.md tells users: :func:`spark_submit_argv` builds
the ``spark-submit`` line (the connector jars of ``devstack jars`` /
``lakehouse_writer/runtime/jars.py`` given with ``--jars``, the driver file :data:`WRITER_MAIN`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lakehouse_writer.runtime import jars
from tests.support.ports import free_port_pair

VENV_BIN = Path(sys.executable).parent
# The driver file of docs/CLUSTER.md: spark-submit runs a Python file, not a module.
WRITER_MAIN = "from lakehouse_writer.cli import run_command\n\nrun_command()\n"
WORKERS, WORKER_MEMORY = 2, "1536m"
# docs/CLUSTER.md's settings for a small cluster: shuffles and Delta's snapshot state as wide
# as its two cores. Delta's default of 50 snapshot partitions made each table read schedule 50
# tasks: a scoped TRUNCATE took 44 s of one 108 s batch on this cluster.
SMALL_CLUSTER_CONF = (
    "--conf",
    "spark.sql.shuffle.partitions=2",
    "--conf",
    "spark.databricks.delta.snapshotPartitions=2",
)


@dataclass
class SparkCluster:
    """A running standalone cluster: its master URL, web UI and worker processes."""

    url: str
    web: str
    folder: Path
    workers: list[subprocess.Popen] = field(default_factory=list)
    master: subprocess.Popen | None = None

    def state(self) -> dict[str, Any]:
        """The master's JSON view (workers, active and completed applications)."""
        with urllib.request.urlopen(f"{self.web}/json/", timeout=10) as answer:
            return json.load(answer)

    def alive_workers(self) -> int:
        """How many workers the master counts as alive."""
        return int(self.state().get("aliveworkers", 0))

    def work_dir(self, worker: int) -> Path:
        """The worker's work folder (one sub-folder per application, one per executor)."""
        return self.folder / f"worker{worker}"

    def executor_logs(self, worker: int) -> list[Path]:
        """The stderr files of the executors this worker has run."""
        return sorted(self.work_dir(worker).glob("app-*/*/stderr"))

    def kill_worker(self, worker: int) -> None:
        """SIGKILL the worker's process group: the worker JVM and its executors."""
        process = self.workers[worker]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


def _spark_env(folder: Path) -> dict[str, str]:
    import pyspark

    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(folder / "logs"),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_NO_DAEMONIZE": "1",
    }


def _start(argv: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(VENV_BIN / "spark-class"), *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: killpg takes its executors along
        )


def _wait_for(cluster: SparkCluster, workers: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if cluster.alive_workers() >= workers:
                return
        except (OSError, ValueError):  # ValueError: an HTML page where /json/ will be
            pass  # the master's UI is not up yet, or not all its pages are
        time.sleep(1)
    logs = "\n".join(
        f"== {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
        for p in sorted(cluster.folder.glob("*.log"))
    )
    raise AssertionError(f"the cluster did not get {workers} workers in {timeout_s}s\n{logs}")


def _stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A master and two one-core workers on 127.0.0.1, stopped after the module."""
    folder = tmp_path_factory.mktemp("spark_cluster")
    env = _spark_env(folder)
    port, web_port = free_port_pair(), free_port_pair()
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", folder)
    try:
        cluster.master = _start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(web_port),
            ],
            folder / "master.log",
            env,
        )
        for i in range(WORKERS):
            cluster.workers.append(
                _start(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        WORKER_MEMORY,
                        "--webui-port",
                        "0",
                        "--work-dir",
                        str(cluster.work_dir(i)),
                        cluster.url,
                    ],
                    folder / f"worker{i}.log",
                    env,
                )
            )
        _wait_for(cluster, WORKERS, timeout_s=180)
        yield cluster
    finally:
        for worker in cluster.workers:
            _stop(worker)
        _stop(cluster.master)


@pytest.fixture(scope="session")
def connector_jars() -> list[str]:
    """The Kafka/Avro/Delta jars as ``devstack jars`` resolves them (Maven, on first use)."""
    return jars.spark_jars()


@pytest.fixture
def writer_main(tmp_path: Path) -> Path:
    """The driver file of docs/CLUSTER.md."""
    path = tmp_path / "writer_main.py"
    path.write_text(WRITER_MAIN)
    return path


def spark_submit_argv(
    cluster: SparkCluster, connector_jars: Sequence[str], main: Path, writer_args: Sequence[str]
) -> list[str]:
    """The ``spark-submit`` line of docs/CLUSTER.md, for ``cluster``."""
    return [
        str(VENV_BIN / "spark-submit"),
        "--master",
        cluster.url,
        "--jars",
        ",".join(connector_jars),
        *SMALL_CLUSTER_CONF,
        str(main),
        "run",
        *writer_args,
    ]


def submit_env(**more: str) -> dict[str, str]:
    """The environment ``spark-submit`` runs with: the venv's Python drives, on loopback."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", **more}
    for name in ("SPARK_MASTER", "SPARK_HOME", "PYSPARK_GATEWAY_PORT"):
        env.pop(name, None)
    return env


def delta_rows(path: Path, columns: Sequence[str]) -> list[tuple]:
    """A Delta table's ``columns`` as sorted tuples, read by DuckDB (deletion vectors too)."""
    import duckdb

    from producer_lib.staging import load_packaged_extension

    with duckdb.connect() as con:
        load_packaged_extension(con, "delta")
        quoted = str(path).replace("'", "''")
        selected = ", ".join(f'"{c}"' for c in columns)
        return sorted(con.sql(f"SELECT {selected} FROM delta_scan('{quoted}')").fetchall())
