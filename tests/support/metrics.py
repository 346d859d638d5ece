"""Prometheus text read back in tests: samples by ``name{labels}``, whatever the label order."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def _key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    escaped = {k: v.replace("\\", "\\\\").replace('"', '\\"') for k, v in labels.items()}
    return name + "{" + ",".join(f'{k}="{escaped[k]}"' for k in sorted(escaped)) + "}"


def _parse_key(key: str) -> str:
    """``name{b="2",a="1"}`` -> ``name{a="1",b="2"}`` (labels as written, sorted by name)."""
    families = text_string_to_metric_families(f"{key} 0\n")
    sample = next(iter(next(iter(families)).samples))
    return _key(sample.name, dict(sample.labels))


class Samples(dict[str, float]):
    """Every sample of a scrape; a key's labels may be written in any order."""

    def __getitem__(self, key: str) -> float:
        return super().__getitem__(_parse_key(key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(_parse_key(key))

    def get(self, key: str, default: float | None = None) -> float | None:  # type: ignore[override]
        return self[key] if key in self else default


def samples(text: str) -> Samples:
    """The samples of Prometheus text (0.0.4)."""
    found = Samples()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            dict.__setitem__(found, _key(sample.name, dict(sample.labels)), sample.value)
    return found
