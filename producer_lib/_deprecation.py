"""Deprecations announced with the release that removes them.

Quickstart::

    from producer_lib._deprecation import deprecated

    def insert_page_async(...):
        deprecated("awaiting SourceAdapter.insert_page", "a plain call", removed_in="1.0.0")

Each deprecation is also listed under "Deprecated" in ``CHANGELOG.md`` with the same release,
and the release named there removes it (the test of this module checks that no deprecation
outlives the release it names).
"""

from __future__ import annotations

import warnings

__all__ = ["FlowPlatformDeprecationWarning", "deprecated"]


class FlowPlatformDeprecationWarning(DeprecationWarning):
    """A deprecated name or behaviour of flow-platform (filter on this class to see only ours)."""


def deprecated(what: str, instead: str, removed_in: str, *, stacklevel: int = 3) -> None:
    """Warn that ``what`` goes away in release ``removed_in`` and what to use ``instead``.

    Args:
        what: The deprecated thing, e.g. ``"awaiting SourceAdapter.insert_page"``.
        instead: What to use instead, e.g. ``"a plain call"``.
        removed_in: The release that removes it, e.g. ``"1.0.0"``.
        stacklevel: Which frame the warning points at: 3 is the caller of the function that
            calls :func:`deprecated`, the user's code.
    """
    warnings.warn(
        f"{what} is deprecated and will be removed in flow-platform {removed_in}; "
        f"use {instead} instead",
        FlowPlatformDeprecationWarning,
        stacklevel=stacklevel,
    )
