"""The compat tests run last, their venvs built meanwhile (:func:`build_early`).

A venv is a minute or two of pip and Maven, waiting mostly on the network and the disk: built in
a thread while the rest of the session runs, it is ready when the compat tests come.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.curated import build_early

HERE = Path(__file__).parent


def _ours(item: pytest.Item) -> bool:
    return item.path.parent == HERE


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the compat tests to the end of the session."""
    items[:] = [i for i in items if not _ours(i)] + [i for i in items if _ours(i)]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the venvs of the compat tests selected (to run)."""
    if session.config.option.collectonly:
        return
    build_early(
        item.module.LINE
        for item in session.items
        if isinstance(item, pytest.Function) and _ours(item)
    )
