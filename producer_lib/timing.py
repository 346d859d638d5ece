"""Where a load or a micro-batch spends its time: seconds per named step, for log lines.

Used by the producer's export summary (:class:`producer_lib.kafka.progress.Progress`) and by
the lakehouse writer's batch and table log lines.
"""

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
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to step ``name`` (from any thread: one writer per step name)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def __str__(self) -> str:
        return ",".join(f"{name}:{secs:.2f}" for name, secs in self.seconds.items()) or "-"
