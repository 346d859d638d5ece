"""Spark's Thrift server (HiveServer2) on an embedded Derby metastore, as users start it.

``spark-submit --class org.apache.spark.sql.hive.thriftserver.HiveThriftServer2`` from the
running pyspark (what Spark's ``sbin/start-thriftserver.sh`` runs), with the settings the
writer gives its own session (Delta's extension and catalog, the connector jars) and the
metastore of :func:`hive_conf`. Embedded Derby admits one JVM at
a time: start the server after the writer has exited.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from lakehouse_writer.runtime.jars import local_jars
from lakehouse_writer.runtime.session import session_settings
from tests.support.ports import free_port_block

SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
# pip's pyspark is its own Spark home; without it spark-submit asks whichever python3 is first
# on PATH to find one.
SPARK_HOME = str(Path(pyspark.__file__).parent)
# The server's first answer waits for Spark, Hive's client and Derby's schema: about 20-40 s
# on two busy cores; a stuck start is reported, not waited on forever.
_START_TIMEOUT_S = 180.0
# NOSASL: a plain Thrift socket, no login; a test server on loopback only.
_HIVE_CONF = {"hive.server2.authentication": "NOSASL", "hive.server2.thrift.bind.host": "127.0.0.1"}


def hive_conf(folder: str) -> dict[str, str]:
    """Spark settings of an embedded Derby metastore kept in ``folder``."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder}/metastore_db;create=true"
        ),
        "spark.sql.warehouse.dir": f"{folder}/warehouse",
    }


def server_command(folder: str, port: int) -> list[str]:
    """The ``spark-submit`` command line of a Thrift server on ``folder``'s metastore."""
    conf = hive_conf(folder)
    settings = session_settings("local[1]", local_jars(), conf)
    hive = {**_HIVE_CONF, "hive.server2.thrift.port": str(port)}
    return [
        SPARK_SUBMIT,
        "--master=local[1]",
        f"--class={SERVER_CLASS}",
        *(f"--conf={k}={v}" for k, v in settings.items()),
        "spark-internal",  # no application jar: the class is in Spark's own jars
        *(arg for k, v in hive.items() for arg in ("--hiveconf", f"{k}={v}")),
    ]


@contextmanager
def thrift_server(folder: str, work: Path, env: dict[str, str]) -> Iterator[int]:
    """Run a Thrift server on ``folder``'s metastore; yield its port once it answers.

    Its log goes to ``work/thrift-server.log``; the server (its process group) is stopped on
    exit.
    """
    port = free_port_block(1)
    log_path = work / "thrift-server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(folder, port),
            cwd=work,  # Derby writes derby.log where it runs
            env={**env, "SPARK_HOME": SPARK_HOME},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_for_port(port, process, log_path)
            yield port
        finally:
            _stop(process)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"Thrift server exited with {process.returncode}:\n{tail}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(1)
    tail = log_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"Thrift server not answering on {port} after {_START_TIMEOUT_S}s:\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (spark-submit and its JVM), then SIGKILL."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
