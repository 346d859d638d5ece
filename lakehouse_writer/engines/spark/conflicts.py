"""A write that lost a Delta commit race is tried again, not the writer stopped.

Delta commits optimistically: when another writer commits to the same table between a write's
read of the table and its commit, and the two overlap (an OPTIMIZE that replaced files a MERGE
read, a property change, which overlaps every commit), the later one fails with a
``ConcurrentModificationException`` (Spark) or a ``CommitFailedError`` (delta-rs). The writer's
writes are idempotent per batch (each carries its transaction id, and a step already committed
is skipped on a second try), so :func:`retry_on_conflict` runs the write again on the table's
new version, a few times with a growing pause, before it lets the error stop the writer.
``lakehouse-writer maintain`` beside a running writer is the usual other party
(docs/OPERATIONS.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["CONFLICT_ATTEMPTS", "is_conflict", "retry_on_conflict"]

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 4  # the first try and three more
_PAUSE_S = 0.5  # before try n: n x this, plus up to as much again at random
# Delta's error classes and exception names, for an error that reaches Python unconverted.
_MARKERS = ("DELTA_CONCURRENT_", "ConcurrentModificationException", "MetadataChangedException")

Result = TypeVar("Result")


def is_conflict(exc: BaseException) -> bool:
    """True for a lost commit race (the error or a cause it was raised from).

    Delta's concurrent-modification family (Spark) and delta-rs's failed commit.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if _is_conflict_type(seen):
            return True
        text = f"{type(seen).__name__}: {seen}"
        if any(marker in text for marker in _MARKERS):
            return True
        seen = seen.__cause__
    return False


def retry_on_conflict(
    write: Callable[[], Result], what: str, attempts: int = CONFLICT_ATTEMPTS
) -> Result:
    """Run ``write``; again (up to ``attempts`` tries in all) while it loses a commit race.

    Args:
        write: An idempotent write: a second run after a partial first one applies the rest.
        what: Names the write in the log (``table=SHOP.ORDERS batch=12``).
        attempts: Tries in all.

    Raises:
        Exception: What the last try raised, or the first error that is no conflict.
    """
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except Exception as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            pause = _PAUSE_S * attempt * (1 + random.random())  # noqa: S311 - jitter only
            log.warning(
                "commit conflict %s attempt=%d of %d: another writer committed to the table "
                "first (%s); trying again in %.1f s",
                what,
                attempt,
                attempts,
                _first_line(exc),
                pause,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises


def _is_conflict_type(exc: BaseException) -> bool:
    try:
        from delta.exceptions import DeltaConcurrentModificationException
    except ImportError:  # pragma: no cover - delta-spark is a dependency of the writer
        return False
    try:
        from deltalake.exceptions import CommitFailedError
    except ImportError:  # pragma: no cover - deltalake is a dependency of the writer
        return isinstance(exc, DeltaConcurrentModificationException)
    return isinstance(exc, DeltaConcurrentModificationException | CommitFailedError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
