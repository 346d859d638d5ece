"""Frames on the pipes between a flow and its encoder process: a length, then the bytes."""

from __future__ import annotations

import struct
from typing import BinaryIO

import pyarrow as pa

__all__ = ["READY", "read_frame", "write_frame"]

_LENGTH = struct.Struct("<Q")
READY = b"ready"  # the first frame: imports done, encoders can be built


def write_frame(out: BinaryIO, data: bytes | memoryview | pa.Buffer) -> None:
    """Write one frame (its length, then its bytes)."""
    view = memoryview(data).cast("B")
    out.write(_LENGTH.pack(len(view)))
    out.write(view)


def read_frame(inp: BinaryIO) -> bytes:
    """Read one frame.

    Raises:
        EOFError: The other end closed the pipe.
    """
    head = inp.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("the pipe closed")
    (size,) = _LENGTH.unpack(head)
    data = inp.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed inside a frame")
    return data
