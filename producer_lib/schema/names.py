"""Reversible encoding of source names into Avro names.

Avro names must match ``[A-Za-z_][A-Za-z0-9_]*``; source systems use ``/BIC/MANDT``,
``REVENUE$``, spaces and umlauts. :func:`encode_name` maps any non-empty name to a valid Avro
name and :func:`decode_name` maps it back. The encoding is stable: it depends on the name
alone, never on the other names of a table.

The scheme:

* A name that is already a valid Avro name and does not start with the marker ``_x_`` is
  kept unchanged (``ORDER_ID`` stays ``ORDER_ID``).
* Any other name becomes ``_x_`` followed by the name with each ASCII letter and digit kept,
  each ``_`` doubled to ``__``, and every other character written as ``_<hex code point>_``
  (lower-case hex, no leading zeros)::

      "/BIC/MANDT000"  -> "_x__2f_BIC_2f_MANDT000"
      "REVENUE$"       -> "_x_REVENUE_24_"
      "Größe"          -> "_x_Gr_f6__df_e"
      "1ST_VALUE"      -> "_x_1ST__VALUE"

Plain names and encoded names never overlap (encoded ones always start with the marker), so
decoding is unambiguous.

The lakehouse keeps a table at ``<lakehouse>/<namespace>/<name>``, each part one path segment
(:func:`path_segment`); :func:`table_name_problem` says which names it cannot hold, so the
producer refuses them before a row is sent and the writer stops only their table.
"""

from __future__ import annotations

import re

from producer_lib.errors import SchemaError

__all__ = [
    "ENCODED_PREFIX",
    "MAX_SEGMENT_BYTES",
    "RESERVED_PREFIX",
    "decode_name",
    "encode_name",
    "is_valid_avro_name",
    "path_segment",
    "table_name_problem",
    "unescape_segment",
]

ENCODED_PREFIX = "_x_"
"""Marks an encoded name; chosen because real column names practically never start with it."""

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPE = re.compile(r"__|_([0-9a-f]+)_|[A-Za-z0-9]")


def is_valid_avro_name(name: str) -> bool:
    """Tell whether ``name`` is a valid Avro simple name (``[A-Za-z_][A-Za-z0-9_]*``)."""
    return _AVRO_NAME.fullmatch(name) is not None


def encode_name(original: str) -> str:
    """Encode a source name into a valid Avro name, reversibly.

    Args:
        original: The name as the source system spells it. Must not be empty.

    Returns:
        ``original`` itself when it is a valid Avro name not starting with ``_x_``, else its
        escaped form (see the module docstring).

    Raises:
        SchemaError: ``original`` is empty.
    """
    if not original:
        raise SchemaError("A column or table name must not be empty", name=original)
    if is_valid_avro_name(original) and not original.startswith(ENCODED_PREFIX):
        return original
    return ENCODED_PREFIX + "".join(_escape_char(ch) for ch in original)


def _escape_char(ch: str) -> str:
    if ch == "_":
        return "__"
    if ch.isascii() and ch.isalnum():
        return ch
    return f"_{ord(ch):x}_"


def decode_name(encoded: str) -> str:
    """Restore the source name from a name made by :func:`encode_name`.

    Args:
        encoded: An Avro name as found in a schema.

    Returns:
        The original source name.

    Raises:
        SchemaError: ``encoded`` is not a name :func:`encode_name` can produce.
    """
    if not is_valid_avro_name(encoded):
        raise SchemaError("Not a valid Avro name, so not an encoded name", name=encoded)
    if not encoded.startswith(ENCODED_PREFIX):
        return encoded
    body = encoded[len(ENCODED_PREFIX) :]
    parts: list[str] = []
    position = 0
    while position < len(body):
        match = _ESCAPE.match(body, position)
        if match is None:
            raise SchemaError("Broken escape in encoded name", name=encoded, position=position)
        parts.append(_unescape(match))
        position = match.end()
    original = "".join(parts)
    if not original or encode_name(original) != encoded:
        raise SchemaError("Encoded name is not in canonical form", name=encoded)
    return original


def _unescape(match: re.Match[str]) -> str:
    token = match.group(0)
    if token == "__":
        return "_"
    if match.group(1) is None:
        return token
    code_point = int(match.group(1), 16)
    if code_point > 0x10FFFF:
        raise SchemaError("Escaped code point out of range", escape=token)
    return chr(code_point)


# -- names in the lakehouse -------------------------------------------------------------------

_ESCAPED = "~/\\:%"
MAX_SEGMENT_BYTES = 255  # what a path segment holds on every file system and object store
RESERVED_PREFIX = "_"
"""Namespaces starting with it are the writer's: ``_commits``, ``_writer_state``, ... sit
beside the namespaces at the lakehouse root."""


def path_segment(name: str) -> str:
    r"""Return ``name`` as one path segment: ``~XX`` hex for characters paths cannot hold.

    ``/``, ``\``, ``:``, ``%``, ``~`` and control characters are escaped; everything else
    (spaces, ``$``, umlauts, CJK) is kept as it is.
    """
    return "".join(f"~{ord(c):02X}" if c in _ESCAPED or ord(c) < 32 else c for c in name)


def unescape_segment(segment: str) -> str:
    """The inverse of :func:`path_segment` (``~2F`` -> ``/``)."""
    return re.sub(r"~([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), segment)


def table_name_problem(namespace: str, name: str) -> str | None:
    """Why the lakehouse cannot hold table ``namespace.name``; None when it can.

    - a namespace starting with ``_`` (:data:`RESERVED_PREFIX`) would sit among the writer's
      own tables (``_writer_state/x``), which maintenance treats as the writer's;
    - a dot in the table name would make ``a.b`` + ``c`` and ``a`` + ``b.c`` the same
      ``a.b.c`` in logs, ``_commits``, stopped tables and the commands that take a table
      (the namespace may hold dots: the last dot of a qualified name splits);
    - a part longer than :data:`MAX_SEGMENT_BYTES` bytes as a path segment (UTF-8, escapes
      included: 86 CJK characters are already too long) cannot be created.
    """
    if not namespace or not name:
        return "a table needs a namespace and a name"
    if namespace.startswith(RESERVED_PREFIX):
        return (
            f"namespaces starting with {RESERVED_PREFIX!r} are reserved for the lakehouse "
            f"writer's own tables (_commits, _writer_state, ...); choose another namespace"
        )
    if "." in name:
        return (
            "a table name must not hold a dot: NAMESPACE.NAME would then name two tables "
            "(the namespace may hold dots)"
        )
    for part, value in (("namespace", namespace), ("table name", name)):
        size = len(path_segment(value).encode("utf-8"))
        if size > MAX_SEGMENT_BYTES:
            return (
                f"the {part} takes {size} bytes as a path segment (UTF-8); a file system holds "
                f"at most {MAX_SEGMENT_BYTES}"
            )
    return None
