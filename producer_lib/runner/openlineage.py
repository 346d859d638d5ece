"""OpenLineage run events of a flow run: START, COMPLETE, FAIL (docs/LINEAGE.md).

Off unless a variable of the OpenLineage client is set: ``OPENLINEAGE_URL``,
``OPENLINEAGE_CONFIG`` or any ``OPENLINEAGE__...`` (``OPENLINEAGE__TRANSPORT__TYPE=console``...);
``OPENLINEAGE_DISABLED=true`` keeps it off. While off, nothing imports the client
(``openlineage-python``, the ``lineage`` extra): :mod:`producer_lib.runner.openlineage_events`,
which builds and sends the events with it, is imported only when on.

:mod:`producer_lib.runner.openlineage_model` names the datasets by the OpenLineage naming spec
and gathers what the commits of a run wrote. Emission is best effort: an event that cannot be
built or sent is logged as a WARNING naming the flow and the run id, and the load goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from producer_lib.runner.openlineage_model import EventType, RunDatasets, RunFacts

__all__ = ["OpenLineageRun", "enabled"]

SWITCHES = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG")  # the client's own variables
PREFIX = "OPENLINEAGE__"  # its structured ones: OPENLINEAGE__TRANSPORT__TYPE, ...


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when the client's variables ask for events (and ``OPENLINEAGE_DISABLED`` doesn't)."""
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name) for name in SWITCHES) or any(key.startswith(PREFIX) for key in env)


class _Sender(Protocol):
    def send(
        self, event_type: EventType, facts: RunFacts, datasets: RunDatasets, error: str | None
    ) -> None: ...


class OpenLineageRun:
    """The OpenLineage events of one flow run; each method never raises.

    Built with :meth:`create`: without the client's variables it sends nothing and imports
    nothing. Events are sent from a worker thread, so a slow receiver does not block the
    event loop (other runs of a served flow go on); the run waits for each event.
    """

    def __init__(
        self,
        facts: RunFacts,
        datasets: RunDatasets,
        sender: _Sender | None,
        logger: logging.Logger,
    ) -> None:
        self.facts = facts
        self.datasets = datasets
        self.sender = sender
        self.logger = logger

    @classmethod
    def create(
        cls,
        facts: RunFacts,
        datasets: RunDatasets,
        logger: logging.Logger,
    ) -> OpenLineageRun:
        """Events for the run of ``facts`` if the client's variables are set, else none."""
        if not enabled():
            return cls(facts, datasets, None, logger)
        try:
            from producer_lib.runner.openlineage_events import client_sender
        except ImportError as exc:
            logger.warning(
                "OpenLineage is configured but its client is not installed (pip install "
                "'flow-platform[lineage]'); no events flow=%s run_id=%s error=%s",
                facts.function_name,
                facts.run_id,
                exc,
            )
            return cls(facts, datasets, None, logger)
        try:
            sender = client_sender()
        except Exception as exc:  # a bad configuration must not fail the load
            cls._warn(logger, facts, "client setup", exc)
            return cls(facts, datasets, None, logger)
        return cls(facts, datasets, sender, logger)

    @property
    def active(self) -> bool:
        """True when events are sent."""
        return self.sender is not None

    async def start(self) -> None:
        """Send START (the run began; no dataset is known yet)."""
        await self._emit("START")

    def committed(
        self, documents: Sequence[Mapping[str, Any]], topic_rows: Mapping[tuple[str, str], int]
    ) -> None:
        """Take what one committed transaction wrote (the commit hook's ``after_commit``)."""
        if self.active:
            self.datasets.add_commit(documents, topic_rows)

    async def complete(self) -> None:
        """Send COMPLETE with the inputs, outputs and column lineage of every commit."""
        await self._emit("COMPLETE")

    async def fail(self, error: str) -> None:
        """Send FAIL with ``error`` and what the commits before the failure wrote."""
        await self._emit("FAIL", error)

    async def _emit(self, event_type: EventType, error: str | None = None) -> None:
        sender = self.sender
        if sender is None:
            return
        try:
            await asyncio.to_thread(sender.send, event_type, self.facts, self.datasets, error)
        except Exception as exc:  # a receiver away, a transport error: never the load's end
            self._warn(self.logger, self.facts, f"{event_type} event", exc)

    @staticmethod
    def _warn(logger: logging.Logger, facts: RunFacts, what: str, exc: BaseException) -> None:
        logger.warning(
            "OpenLineage %s failed, the load goes on flow=%s run_id=%s error=%s: %s",
            what,
            facts.function_name,
            facts.run_id,
            type(exc).__name__,
            exc,
        )
