"""A broker of the fault tests' own, which they may stop and start (never the shared one).

It runs beside the devstack broker on free ports, from the same Maven jars, in a temp folder.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from devstack import broker
from devstack.broker import BrokerLayout
from tests.support.ports import free_port_pair


@dataclass(frozen=True)
class OwnBroker:
    """A single-node devstack broker that a test may take down and bring back."""

    layout: BrokerLayout

    @property
    def bootstrap(self) -> str:
        """Its ``bootstrap.servers``."""
        return self.layout.bootstrap

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL); its data stays."""
        broker.down(self.layout)

    def start(self) -> None:
        """Start it again on the same ports and data; returns once it answers."""
        broker.up(self.layout)


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnBroker]:
    """A broker started for this module and stopped after it."""
    layout = BrokerLayout(root=tmp_path_factory.mktemp("own") / "kafka", port=free_port_pair())
    broker.up(layout)
    try:
        yield OwnBroker(layout)
    finally:
        gc.collect()  # producers of failed tests would retry the stopped broker, logging each
        broker.down(layout)
