"""The installed version of flow-platform, the distribution of producer_lib and lakehouse_writer.

The version comes from git tags at build time (setuptools-scm, ``pyproject.toml``) and is read
back from the installed metadata; a source tree that was never installed says ``0+unknown``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "installed_version"]

DISTRIBUTION = "flow-platform"


def installed_version() -> str:
    """``0.5.0``, ``0.5.1.dev3+g1a2b3c4``, or ``0+unknown`` when the package is not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
