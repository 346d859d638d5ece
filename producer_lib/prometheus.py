"""Prometheus text exposition format (0.0.4): metric families as lines, for ``/metrics``.

Shared by ``producer-lib serve`` (:mod:`producer_lib.runner.metrics`) and the lakehouse
writer (:mod:`lakehouse_writer.ops.metrics`); no client library needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["CONTENT_TYPE", "Sample", "family", "summary"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Sample = tuple[Mapping[str, str], float]  # (labels, value)


def family(name: str, kind: str, doc: str, samples: Iterable[Sample]) -> list[str]:
    """``# HELP``, ``# TYPE`` and one line per sample of metric ``name``."""
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
    return lines


def summary(
    name: str, doc: str, samples: Iterable[tuple[Mapping[str, str], float, int]]
) -> list[str]:
    """A summary without quantiles: ``name_sum`` and ``name_count`` per label set."""
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} summary"]
    for labels, total, count in samples:
        lines += [
            f"{name}_sum{_labels(labels)} {_number(total)}",
            f"{name}_count{_labels(labels)} {count}",
        ]
    return lines


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
