"""What a run did (:class:`RunResult`), and the error a failed run raises (:class:`RunFailed`).

Apart from :mod:`producer_lib.runner.runner` so the triggers that answer runs
(:mod:`producer_lib.runner.triggers`) read results without importing the runner back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from producer_lib.errors import ProducerLibError
from producer_lib.runner.execution_log import LoadKind

__all__ = ["RunFailed", "RunResult"]


@dataclass(frozen=True)
class RunResult:
    """What a run did: the HTTP response body and the CLI's output (``to_json``)."""

    run_id: str
    function_name: str
    dataflow: str
    partition: str
    load: LoadKind
    status: str
    rows: dict[str, int]
    duration_s: float
    commit_id: str | None
    commit_ids: tuple[str, ...]
    delta_pointer: Any
    error: str | None = None
    truncated: dict[str, dict[str, int]] = field(default_factory=dict)
    expectations: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return {**self.__dict__, "commit_ids": list(self.commit_ids)}


class RunFailed(ProducerLibError):
    """A run failed; ``result`` holds what it did (status FAILED, the error)."""

    def __init__(self, message: str, result: RunResult, **context: Any) -> None:
        self.result = result
        super().__init__(message, **context)
