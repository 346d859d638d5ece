"""Progress of a long load: rows and rows/s on a terminal, one summary log line at the end.

On a TTY (``stream.isatty()``) a single line on stderr is rewritten at most every
:data:`REFRESH_S` seconds; elsewhere (CI, containers, Azure Functions) nothing is printed
until the summary, which always goes to the log. The summary splits the load's time by
step (``steps=check_keys:0.30,encode:1.17,...``, seconds): where a slow export spends it.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

from producer_lib.timing import Steps

__all__ = ["Progress"]

log = logging.getLogger(__name__)

REFRESH_S = 0.5  # often enough to look alive, rarely enough to cost nothing


class Progress:
    """Count rows of one load and show them.

    Args:
        label: What is loaded, e.g. ``topic=SAMPLE_PLAN``.
        logger: Where the summary goes.
        stream: Terminal stream; progress is shown only when it is a TTY.
    """

    def __init__(
        self, label: str, logger: logging.Logger | None = None, stream: TextIO | None = None
    ) -> None:
        self.label = label
        self.rows = 0
        self._log = logger or log
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._start = time.monotonic()
        self._shown = self._start
        self.steps = Steps()  # seconds per step; a step may run on another thread

    @property
    def elapsed_s(self) -> float:
        """Seconds since the load started."""
        return time.monotonic() - self._start

    @property
    def rows_per_s(self) -> float:
        """Average rows per second so far."""
        return self.rows / max(self.elapsed_s, 1e-9)

    def add(self, rows: int) -> None:
        """Count ``rows`` more rows; refresh the terminal line when due."""
        self.rows += rows
        if self._tty and time.monotonic() - self._shown >= REFRESH_S:
            self._shown = time.monotonic()
            self._stream.write(f"\r{self.label}: {self.rows:,} rows, {self.rows_per_s:,.0f} rows/s")
            self._stream.flush()

    def finish(self) -> None:
        """End the terminal line; log ``rows``, ``seconds``, ``rows_per_s`` and the steps."""
        if self._tty and self._shown != self._start:
            self._stream.write("\n")
            self._stream.flush()
        self._log.info(
            "produced %s rows=%d seconds=%.3f rows_per_s=%.0f steps=%s",
            self.label,
            self.rows,
            self.elapsed_s,
            self.rows_per_s,
            self.steps,
        )
