"""Apicurio Registry on loopback: a Confluent-compatible Schema Registry without Docker.

The server is Apicurio Registry 3.x's Quarkus tarball from Maven Central (``pom.xml``, profile
``registry``), in-memory storage (schemas are gone when it stops), its Confluent-compatible API
at ``/apis/ccompat/v7``. Apicurio 3.x is built for Java 21: devstack looks for a JDK 21+ beside
the default Java 17.
"""

from __future__ import annotations

import logging
import os
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack import jars, paths, process, tools
from devstack.errors import DevstackError

log = logging.getLogger(__name__)

DEFAULT_PORT = 18081  # 8081 + 10000, like the broker's port: no clash with a standard registry
START_TIMEOUT_S = 120.0
MIN_JAVA = 21  # Apicurio Registry 3.x classes are Java 21 bytecode
_HEAP = ("-Xmx384m", "-XX:+UseSerialGC")  # in-memory H2 with a handful of test schemas


@dataclass(frozen=True)
class RegistryLayout:
    """Files and ports of the devstack schema registry."""

    root: Path
    port: int

    @classmethod
    def default(cls) -> RegistryLayout:
        """The layout under devstack's home, port from ``DEVSTACK_REGISTRY_PORT`` or 18081."""
        port = int(os.environ.get("DEVSTACK_REGISTRY_PORT", DEFAULT_PORT))
        return cls(root=paths.home() / "registry", port=port)

    @property
    def url(self) -> str:
        """The ``SCHEMA_REGISTRY_URL`` of the Confluent-compatible API."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    @property
    def app(self) -> Path:
        """The unpacked Quarkus application (``quarkus-run.jar`` inside)."""
        return self.root / "app"

    @property
    def runner(self) -> Path:
        """The jar started with ``java -jar``; its path marks the process as ours."""
        return self.app / "quarkus-run.jar"

    @property
    def log_file(self) -> Path:
        """The server's output."""
        return self.root / "registry.log"

    @property
    def pid_file(self) -> Path:
        """The pid of the running server."""
        return self.root / "registry.pid"


def status(layout: RegistryLayout | None = None) -> int | None:
    """Return the pid of the running devstack registry, or None."""
    layout = layout or RegistryLayout.default()
    return process.running_pid(layout.pid_file, str(layout.runner))


def up(layout: RegistryLayout | None = None) -> RegistryLayout:
    """Start the registry unless it runs already, and wait until its API answers."""
    layout = layout or RegistryLayout.default()
    if status(layout) is None:
        ports = (layout.port, layout.port + 1)
        process.ensure_ports_free(ports, env_var="DEVSTACK_REGISTRY_PORT")
        java = tools.java(MIN_JAVA, purpose="Apicurio Registry 3.x")
        _unpack(layout)
        cmd = [
            java,
            *_HEAP,
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={layout.port}",
            # the management interface is build-time enabled; keep it off 0.0.0.0:9000
            "-Dquarkus.management.host=127.0.0.1",
            f"-Dquarkus.management.port={layout.port + 1}",
            "-jar",
            str(layout.runner),
        ]
        pid = process.start(cmd, layout.log_file, layout.pid_file, layout.app)
        log.info("started schema registry pid=%d url=%s", pid, layout.url)
    try:
        _wait_until_answering(layout)
    except DevstackError:
        process.stop(layout.pid_file, str(layout.runner))
        raise
    return layout


def down(layout: RegistryLayout | None = None) -> bool:
    """Stop the devstack registry; True if it was running."""
    layout = layout or RegistryLayout.default()
    return process.stop(layout.pid_file, str(layout.runner))


def _unpack(layout: RegistryLayout) -> None:
    tarballs = sorted(jars.jar_dir("registry").glob("*.tar.gz"))
    if not tarballs:
        raise DevstackError("Maven resolved no Apicurio Registry tarball (profile 'registry').")
    stamp = layout.app / ".unpacked-from"
    if stamp.is_file() and stamp.read_text().strip() == tarballs[-1].name:
        return
    layout.app.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarballs[-1]) as archive:  # no top-level folder inside
        archive.extractall(layout.app, filter="data")
    stamp.write_text(tarballs[-1].name + "\n")


def _wait_until_answering(layout: RegistryLayout) -> None:
    def probe() -> None:
        with urllib.request.urlopen(f"{layout.url}/subjects", timeout=3):
            pass  # non-2xx answers raise HTTPError

    process.wait_until_ready(
        probe,
        lambda: status(layout) is not None,
        f"The schema registry at {layout.url}",
        layout.log_file,
        START_TIMEOUT_S,
    )
