"""Deprecations name the release that removes them, and none outlives it (CHANGELOG.md)."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

from producer_lib._deprecation import FlowPlatformDeprecationWarning, deprecated
from producer_lib._version import installed_version

REPO = Path(__file__).resolve().parents[2]


def old_call() -> None:
    deprecated("awaiting insert_page", "a plain call", removed_in="9.0.0")


def test_the_warning_names_what_instead_and_the_release_and_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old_call()  # the line a user would be shown
    (warning,) = caught
    assert issubclass(warning.category, DeprecationWarning)
    assert issubclass(warning.category, FlowPlatformDeprecationWarning)
    assert str(warning.message) == (
        "awaiting insert_page is deprecated and will be removed in flow-platform 9.0.0; "
        "use a plain call instead"
    )
    assert warning.filename == __file__


def _release(version: str) -> tuple[int, ...]:
    """``0.7.1.dev3+g1a2b`` -> (0, 7, 1)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def deprecations(root: Path) -> list[tuple[str, str, str]]:
    """``(file, what, removed_in)`` of every ``deprecated(...)`` call with literal arguments."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "deprecated"):
                continue
            values = [a.value for a in node.args if isinstance(a, ast.Constant)]
            values += [k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)]
            if len(values) >= 3:
                found.append((str(path), str(values[0]), str(values[2])))
    return found


def test_the_scanner_finds_a_deprecation(tmp_path):
    (tmp_path / "shim.py").write_text(
        'deprecated("awaiting prepare_load", "a plain call", removed_in="1.0.0")\n'
    )
    assert deprecations(tmp_path) == [(str(tmp_path / "shim.py"), "awaiting prepare_load", "1.0.0")]


@pytest.mark.parametrize("package", ["producer_lib", "lakehouse_writer"])
def test_no_deprecation_outlives_its_release_and_each_is_in_the_changelog(package):
    now = _release(installed_version())
    changelog = (REPO / "CHANGELOG.md").read_text()
    for path, what, removed_in in deprecations(REPO / package):
        assert _release(removed_in) > now, f"{path}: {what} was to go in {removed_in}"
        assert what in changelog, f"{path}: {what} is not under Deprecated in CHANGELOG.md"
