"""PostgreSQL fixture: a real server for the session, in a temporary directory.

``POSTGRES_DSN`` set: use that server, start nothing. Otherwise the PostgreSQL server binaries
(``initdb``, ``pg_ctl``; ``scripts/install-postgres.sh`` installs them) are found on PATH or
under ``/usr/lib/postgresql/<version>/bin``; the server runs on 127.0.0.1 with a free port and
its socket in the temporary directory, and stops at session end. PostgreSQL refuses to run as
root: as root the server runs as the system user ``postgres`` (via ``runuser``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_USER = "postgres"


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent  # /usr/local/bin/initdb may be a symlink
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].parent if candidates else None


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", _USER, "--", *args] if os.geteuid() == 0 else args


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _make_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="pgtest-"))  # /tmp: traversable by the server user
    if os.geteuid() == 0:
        entry = pwd.getpwnam(_USER)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    return home


def _run(args: list[str]) -> None:
    result = subprocess.run(_as_server_user(args), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {result.stdout}\n{result.stderr}")


def _create_database(port: int) -> str:
    import psycopg  # the client the readers use

    base = f"host=127.0.0.1 port={port} user={_USER}"
    with psycopg.connect(f"{base} dbname=postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE test")
    return f"{base} dbname=test"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of a real PostgreSQL database ``test`` (user ``postgres``, trust auth)."""
    configured = os.environ.get("POSTGRES_DSN")
    if configured:
        yield configured
        return
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found: run scripts/install-postgres.sh")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_USER)
        except KeyError:
            pytest.skip("running as root without a 'postgres' system user to run the server")
    home, port = _make_home(), _free_port()
    data = home / "data"
    _run([str(bin_dir / "initdb"), "-D", str(data), "-U", _USER, "-A", "trust", "-E", "UTF8"])
    options = f"-h 127.0.0.1 -p {port} -k {home} -c fsync=off"
    pg_ctl = str(bin_dir / "pg_ctl")
    _run([pg_ctl, "-D", str(data), "-l", str(home / "server.log"), "-o", options, "-w", "start"])
    try:
        yield _create_database(port)
    finally:
        _run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"])
        shutil.rmtree(home, ignore_errors=True)
