"""Azurite, the Azure Storage emulator (blob service), from npm, on loopback.

The tests of Azure storage paths (``az://``) run against it. It is installed with npm on first
use into ``~/.cache/flow-platform/azurite`` (``AZURITE_HOME``) at a pinned version, and each
test session starts its own blob service on a free port, keeping its data in a temp folder.

Clients reach it with the emulator's well-known account (:data:`ACCOUNT`, :data:`KEY`) through
:meth:`Azurite.connection_string`. delta-rs's object store (DuckDB's ``delta_scan`` of an
``az://`` table) looks for the emulator at ``AZURITE_BLOB_STORAGE_URL``
(:meth:`Azurite.blob_url`), not at the connection string's endpoint.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from devstack.errors import DevstackError

__all__ = ["ACCOUNT", "KEY", "VERSION", "Azurite", "install"]

VERSION = "3.37.0"
ACCOUNT = "devstoreaccount1"  # the emulator's well-known account and key (public, not secret)
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_TIMEOUT_S = 30.0


def home() -> Path:
    """Where Azurite is installed: ``AZURITE_HOME``, else ``~/.cache/flow-platform/azurite``."""
    explicit = os.environ.get("AZURITE_HOME")
    return Path(explicit) if explicit else Path.home() / ".cache" / "flow-platform" / "azurite"


def install() -> Path:
    """Install Azurite with npm unless it is there; return its ``azurite-blob`` launcher.

    Raises:
        DevstackError: npm is missing or the install failed (its output in the message).
    """
    launcher = home() / VERSION / "node_modules" / ".bin" / "azurite-blob"
    if launcher.exists():
        return launcher
    npm = shutil.which("npm")
    if npm is None:
        raise DevstackError("Azurite needs Node.js and npm: install them (Node 18 or later)")
    target = home() / VERSION
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", f"azurite@{VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not launcher.exists():
        raise DevstackError(f"npm install azurite@{VERSION} failed: {done.stderr[-2000:]}")
    return launcher


@dataclass
class Azurite:
    """A blob service on ``127.0.0.1:port`` keeping its data under ``root``."""

    root: Path
    port: int
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def blob_url(self) -> str:
        """The emulator's URL (``AZURITE_BLOB_STORAGE_URL`` for delta-rs' object store)."""
        return f"http://127.0.0.1:{self.port}"

    def connection_string(self) -> str:
        """A connection string of the emulator's account."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.blob_url}/{ACCOUNT};"
        )

    def start(self) -> None:
        """Start the blob service and wait until it listens.

        Raises:
            DevstackError: It did not listen within 30 s (its log in the message).
        """
        launcher = install()
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "azurite.log").open("wb")
        self._process = subprocess.Popen(
            [
                str(launcher),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.root / "data"),
                "--skipApiVersionCheck",
                "--loose",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                text = (self.root / "azurite.log").read_text(errors="replace")[-2000:]
                raise DevstackError(f"Azurite did not start on port {self.port}: {text}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the blob service (its data stays under ``root``)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._process = None


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0
