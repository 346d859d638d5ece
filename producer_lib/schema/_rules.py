"""Value rules shared by both encode paths: text length, ASCII, float32 range, valid Unicode.

The column path (``_columns``) checks whole Arrow columns at once; the row path (fastavro per
row, and constants) runs a :data:`Guard` over each Python value. Both take their messages
from here, so a value breaks a rule in the same words on either path. No rule alters a value
unless the schema opts in to truncation (``truncate`` on the type, ``truncateText`` on the
record); a truncation is then counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FLOAT32_LIMIT = 2.0**128 - 2.0**103
"""The smallest magnitude that rounds to inf in float32 (float32's max + half an ulp)."""

TEXT_TYPES = {"VARCHAR": "AvroVarchar", "NVARCHAR": "AvroNVarchar"}
"""Length-bounded text logical types and the class that declares them."""

_SHOWN = 40  # characters of an offending text put into a message (a value may be megabytes)


class Refused(Exception):
    """A value breaks a rule of its type; the message says which (no row or column yet)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@dataclass
class Tally:
    """Values truncated while guarding one column."""

    truncated: int = 0


Guard = Callable[[Any, Tally], Any]
"""Checks one Python value of a type; returns it (truncated if opted in) or raises Refused."""


def shown(text: str) -> str:
    """The start of ``text`` as a repr, marked when cut."""
    return repr(text) if len(text) <= _SHOWN else repr(text[:_SHOWN]) + "..."


def too_long(logical_type: str, limit: int, text: str) -> str:
    """Message: text longer than its declared length, and how to allow it."""
    cls = TEXT_TYPES.get(logical_type, logical_type)
    return (
        f"{logical_type}({limit}) value of {len(text)} characters is longer than {limit}: "
        f"{shown(text)}; declare a larger length, or opt in to truncation with "
        f"{cls}({limit}, truncate=True) or ValueSchema.truncate_text = True"
    )


def not_ascii(limit: int | None, text: str) -> str:
    """Message: a VARCHAR value with a non-ASCII character."""
    return f"VARCHAR({limit}) value {shown(text)} is not ASCII; declare the column AvroNVarchar"


def float_overflow(value: float) -> str:
    """Message: a finite number beyond float32's range (it would become inf)."""
    return (
        f"value {value!r} overflows Avro float (32-bit, at most about 3.4028235e38); "
        "declare the column AvroDouble"
    )


def not_unicode(exc: UnicodeEncodeError) -> str:
    """Message: a Python string holding a lone surrogate (not encodable as UTF-8)."""
    bad = exc.object[exc.start : exc.end]
    code = f"U+{ord(bad[0]):04X}" if bad else "?"
    return (
        f"text is not valid Unicode: lone surrogate {code} at character {exc.start} of "
        f"{shown(exc.object)}; fix the source data or decode it with errors='replace'"
    )


def not_utf8(raw: bytes) -> str:
    """Message: an Arrow string whose bytes are not UTF-8 (e.g. an encoded lone surrogate)."""
    text = raw[: _SHOWN * 4]
    return (
        f"text is not valid Unicode: {text!r} is not UTF-8 (a lone surrogate or a broken "
        "byte sequence); fix the source data or decode it with errors='replace'"
    )


def build_guard(avro: Any, truncate_text: bool = False) -> Guard | None:
    """The guard of a (JSON) Avro type, or None when no value of it needs a check.

    Args:
        avro: The type as in the schema JSON (name, dict, or union list).
        truncate_text: Truncate over-length VARCHAR/NVARCHAR text of every field (the
            record's ``truncateText``), not only of types that say ``"truncate": true``.
    """
    if isinstance(avro, list):
        branches = [branch for branch in avro if branch != "null"]
        if len(branches) != 1:
            return None  # a wider union: fastavro picks the branch, and checks it
        return _nullable(build_guard(branches[0], truncate_text))
    if isinstance(avro, str):
        avro = {"type": avro}
    if not isinstance(avro, dict):
        return None
    base = avro.get("type")
    if isinstance(base, dict | list):
        return build_guard(base, truncate_text)
    builder = _BUILDERS.get(str(base))
    return builder(avro, truncate_text) if builder else None


def _nullable(inner: Guard | None) -> Guard | None:
    if inner is None:
        return None
    return lambda value, tally: None if value is None else inner(value, tally)


def _float_guard(spec: dict[str, Any], truncate_text: bool) -> Guard:
    def guard(value: Any, tally: Tally) -> Any:
        if isinstance(value, float) and math.isfinite(value) and abs(value) >= FLOAT32_LIMIT:
            raise Refused(float_overflow(value))
        if isinstance(value, int) and abs(value) >= FLOAT32_LIMIT:
            raise Refused(float_overflow(value))
        return value

    return guard


def _text_guard(spec: dict[str, Any], truncate_text: bool) -> Guard | None:
    logical, limit = spec.get("logicalType"), spec.get("length")
    if logical not in TEXT_TYPES or not isinstance(limit, int):
        return None
    truncate = truncate_text or spec.get("truncate") is True

    def guard(value: Any, tally: Tally) -> Any:
        if not isinstance(value, str):
            return value
        if logical == "VARCHAR" and not value.isascii():
            raise Refused(not_ascii(limit, value))
        if len(value) <= limit:
            return value
        if not truncate:
            raise Refused(too_long(str(logical), limit, value))
        tally.truncated += 1
        return value[:limit]

    return guard


def _array_guard(spec: dict[str, Any], truncate_text: bool) -> Guard | None:
    item = build_guard(spec.get("items"), truncate_text)
    if item is None:
        return None
    return lambda value, tally: (
        value if not isinstance(value, list) else [item(x, tally) for x in value]
    )


def _map_guard(spec: dict[str, Any], truncate_text: bool) -> Guard | None:
    inner = build_guard(spec.get("values"), truncate_text)
    if inner is None:
        return None
    return lambda value, tally: (
        value if not isinstance(value, dict) else {k: inner(x, tally) for k, x in value.items()}
    )


def _record_guard(spec: dict[str, Any], truncate_text: bool) -> Guard | None:
    guards: list[tuple[tuple[str, ...], Guard]] = []
    for field in spec.get("fields") or ():
        field_guard = build_guard(field.get("type"), truncate_text)
        if field_guard is not None:
            names = (field["name"], *([field["sourceName"]] if "sourceName" in field else []))
            guards.append((names, field_guard))
    if not guards:
        return None

    def guard(value: Any, tally: Tally) -> Any:
        if not isinstance(value, dict):
            return value
        value = dict(value)
        for names, inner in guards:
            for name in names:
                if name in value:
                    value[name] = inner(value[name], tally)
        return value

    return guard


_BUILDERS: dict[str, Callable[[dict[str, Any], bool], Guard | None]] = {
    "float": _float_guard,
    "string": _text_guard,
    "array": _array_guard,
    "map": _map_guard,
    "record": _record_guard,
}
