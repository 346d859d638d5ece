"""Progress of a long load: rows and rows per second, logged every few seconds."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

LOG_EVERY_SECONDS = 10.0  # often enough to see a load move, rare enough to stay quiet in CI


@dataclass
class Progress:
    """Counts the rows of one load and logs ``table= rows= rows_per_s=`` now and then.

    Attributes:
        logger: Where progress goes (INFO).
        table: The DuckDB table being loaded.
        every: Seconds between two progress lines.
    """

    logger: logging.Logger
    table: str
    every: float = LOG_EVERY_SECONDS
    rows: int = 0
    pages: int = 0
    started: float = field(default_factory=time.monotonic)
    _last_log: float = field(default_factory=time.monotonic)

    def add(self, rows: int) -> None:
        """Count a page of ``rows`` rows; log when the last line is old enough."""
        self.rows += rows
        self.pages += 1
        now = time.monotonic()
        if now - self._last_log >= self.every:
            self._last_log = now
            self._log("loading", now)

    def done(self) -> None:
        """Log the final count and rate."""
        self._log("loaded", time.monotonic())

    def _log(self, what: str, now: float) -> None:
        elapsed = max(now - self.started, 1e-9)
        self.logger.info(
            "%s table=%s rows=%d pages=%d rows_per_s=%.0f elapsed_s=%.1f",
            what,
            self.table,
            self.rows,
            self.pages,
            self.rows / elapsed,
            elapsed,
        )
