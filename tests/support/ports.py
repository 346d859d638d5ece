"""Free loopback ports for brokers the tests start themselves."""

from __future__ import annotations

import socket


def free_port_pair() -> int:
    """A port P such that P and P+1 are free on 127.0.0.1 (client and controller listeners)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65000 and _free(port + 1):
            return port
    raise RuntimeError("no two free neighbouring ports on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
