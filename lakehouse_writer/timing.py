"""Where a micro-batch spends its time: seconds per named step, for the batch's log lines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Steps:
    """Seconds per named step; a step entered twice adds up.

    Example::

        steps = Steps()
        with steps("decode"):
            ...
        log.info("batch done steps=%s", steps)  # steps=decode:1.20
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the body as step ``name``."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started

    def __str__(self) -> str:
        return ",".join(f"{name}:{secs:.2f}" for name, secs in self.seconds.items()) or "-"
