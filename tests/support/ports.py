"""Free loopback ports for brokers the tests start themselves."""

from __future__ import annotations

import socket


def free_port_pair() -> int:
    """A port P such that P and P+1 are free on 127.0.0.1 (client and controller listeners)."""
    return free_port_block(2)


def free_port_block(count: int) -> int:
    """A port P such that P..P+count-1 are free on 127.0.0.1 (a cluster's listeners)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count < 65000 and all(_free(p) for p in range(base + 1, base + count)):
            return base
    raise RuntimeError(f"no {count} free neighbouring ports on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
