"""An independent model of a history table (SCD type 2), from DESIGN and docs/OPERATIONS.md.

Events applied in change-time order, one key's at a time: an upsert closes the key's open
version and opens one with its payload; an archive does the same with the payload of the
key's last upsert since its last delete (none: the first archive's since then, else its own);
a delete closes; a GDPR delete removes every version of the key so far; a TRUNCATE closes the
open versions its scope covers. The writer's history must equal this whatever the batches
and (bounded by the tombstones and TRUNCATEs, which drop rows older than them) their order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "History", "Version"]


@dataclass(frozen=True)
class Event:
    """One change of one key (or a TRUNCATE: ``key`` None, ``covers`` its scope).

    ``kind``: ``upsert``, ``archive``, ``delete``, ``erase`` (GDPR) or ``truncate``.
    """

    time: int
    kind: str
    key: Any = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    code: str = "I"
    covers: Callable[[Mapping[str, Any]], bool] | None = None


@dataclass
class Version:
    """One row of the history table."""

    key: Any
    payload: Mapping[str, Any]
    code: str
    valid_from: int
    valid_to: int | None = None


@dataclass
class _Key:
    versions: list[Version] = field(default_factory=list)
    upserted: Mapping[str, Any] | None = None  # the last upsert's payload since a delete
    archived: Mapping[str, Any] | None = None  # the first archive's payload since a delete

    @property
    def open(self) -> Version | None:
        last = self.versions[-1] if self.versions else None
        return last if last is not None and last.valid_to is None else None

    def close(self, time: int) -> None:
        if self.open is not None:
            self.open.valid_to = time

    def forget(self) -> None:
        self.upserted = self.archived = None


class History:
    """The history table the events give (:meth:`apply` them in time order)."""

    def __init__(self) -> None:
        self._keys: dict[Any, _Key] = {}

    def apply(self, events: Iterable[Event]) -> History:
        """Apply ``events`` in time order (a TRUNCATE first among those of its time)."""
        for event in sorted(events, key=lambda e: (e.time, e.kind != "truncate")):
            self._one(event)
        return self

    def _one(self, e: Event) -> None:
        if e.kind == "truncate":
            assert e.covers is not None
            for state in self._keys.values():
                if state.open is not None and e.covers(state.open.payload):
                    state.close(e.time)
                    state.forget()
            return
        state = self._keys.setdefault(e.key, _Key())
        state.close(e.time)
        if e.kind in ("delete", "erase"):
            if e.kind == "erase":
                state.versions.clear()
            state.forget()
            return
        payload = e.payload
        if e.kind == "archive":
            state.archived = state.archived or e.payload
            payload = state.upserted or state.archived
        else:
            state.upserted = e.payload
        state.versions.append(Version(e.key, payload, e.code, e.time))

    def rows(self) -> list[Version]:
        """Every version, by key and valid-from."""
        found = [v for s in self._keys.values() for v in s.versions]
        return sorted(found, key=lambda v: (str(v.key), v.valid_from))
