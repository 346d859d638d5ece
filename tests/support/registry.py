"""Schema registry fixture: ``SCHEMA_REGISTRY_URL`` when set, else devstack's Apicurio.

Started on first use and stopped at the end of the session when this fixture started it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def schema_registry_url() -> Iterator[str]:
    """Base URL of a Confluent-compatible schema registry API."""
    configured = os.environ.get("SCHEMA_REGISTRY_URL")
    if configured:
        yield configured
        return
    from devstack import registry

    started_here = registry.status() is None
    layout = registry.up()
    try:
        yield layout.url
    finally:
        if started_here:
            registry.down(layout)
