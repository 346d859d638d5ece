"""Free loopback ports for brokers the tests start themselves."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port_pair() -> int:
    """A port P such that P and P+1 are free on 127.0.0.1 (client and controller listeners)."""
    return free_port_block(2)


def free_port_block(count: int) -> int:
    """A port P such that P..P+count-1 are free on 127.0.0.1 (a cluster's listeners).

    Chosen below the kernel's ephemeral range: a port in it may be taken by any outgoing
    connection between this check and the broker's bind (a 3-node cluster's last node once
    failed so: "Address already in use").
    """
    low, high = _below_ephemeral()
    for _ in range(200):
        base = random.randrange(low, high - count)
        if all(_free(p) for p in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} free neighbouring ports on 127.0.0.1 in [{low}, {high})")


def _below_ephemeral() -> tuple[int, int]:
    """Ports from 20000 up to the start of the ephemeral range (Linux: 32768 by default)."""
    try:
        start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        start = 32768
    return (20000, start) if start > 21000 else (10000, 20000)


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
