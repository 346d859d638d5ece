"""Start, find and stop the background Java processes devstack owns.

A process is ours when its pid file exists and the running command line still holds the marker
we started it with (the path of its config file), so a recycled pid is never signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from devstack.errors import DevstackError


def start(cmd: Sequence[str], log_file: Path, pid_file: Path, cwd: Path) -> int:
    """Start ``cmd`` detached from this session, output to ``log_file``; return its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - the command is built by devstack itself
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,  # survives the CLI; `down` stops it
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def running_pid(pid_file: Path, marker: str) -> int | None:
    """Return the pid recorded in ``pid_file`` if that process runs and is ours, else None."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    cmdline = _cmdline(pid)
    if cmdline is None or marker not in cmdline or _is_zombie(pid):
        return None
    return pid


def _cmdline(pid: int, settle_s: float = 2.0) -> str | None:
    """The command line of ``pid``; None if there is no such process.

    A process reads as an empty command line while it is in ``execve``; the JDK launcher
    re-executes itself at start-up, so an empty read is retried for ``settle_s`` seconds.
    """
    deadline = time.monotonic() + settle_s
    while True:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return None
        if raw or time.monotonic() > deadline:
            return raw.replace(b"\0", b" ").decode(errors="replace")
        time.sleep(0.05)


def stop(pid_file: Path, marker: str, grace_s: float = 30.0) -> bool:
    """Stop our process (SIGTERM, then SIGKILL after ``grace_s``); True if one was running."""
    pid = running_pid(pid_file, marker)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and running_pid(pid_file, marker) is not None:
        time.sleep(0.2)
    if running_pid(pid_file, marker) is not None:
        os.kill(pid, signal.SIGKILL)
        while running_pid(pid_file, marker) is not None:
            time.sleep(0.1)
    pid_file.unlink(missing_ok=True)
    return True


def ensure_ports_free(ports: Sequence[int], env_var: str) -> None:
    """Raise DevstackError naming the first of ``ports`` on 127.0.0.1 that is taken."""
    for port in ports:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                raise DevstackError(
                    f"Port {port} on 127.0.0.1 is taken by another process (a server left "
                    f"running, or another checkout's devstack?). Stop it, or pick free ports "
                    f"with {env_var}=<port> (the next port is used too)."
                ) from exc


def wait_until_ready(
    probe: Callable[[], object],
    alive: Callable[[], bool],
    what: str,
    log_file: Path,
    timeout_s: float,
) -> None:
    """Call ``probe`` until it returns without raising; fail fast if the process dies.

    Args:
        probe: Raises while the server is not ready (any exception means "not yet").
        alive: Whether the server process still runs.
        what: The server and where it listens, for messages ("The Kafka broker at ...").
        log_file: Shown (its tail) when the process died during start-up.
        timeout_s: How long to wait at most.

    Raises:
        DevstackError: The process exited, or did not answer within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            probe()
            return
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            if not alive():
                raise DevstackError(
                    f"{what} exited during start-up. Last lines of {log_file}:\n{tail(log_file)}"
                ) from exc
            if time.monotonic() > deadline:
                raise DevstackError(
                    f"{what} did not answer within {timeout_s:.0f}s; see {log_file}"
                ) from exc
        time.sleep(0.5)


def tail(path: Path, lines: int = 25) -> str:
    """Return the last ``lines`` lines of a log file (empty if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    state = stat.rsplit(")", 1)[1].split()[0]
    if state == "Z":
        try:  # a child of this very process: reap it so it disappears
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return True
    return False
