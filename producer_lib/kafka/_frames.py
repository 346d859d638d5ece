"""The pipes between a flow and its encoder process: frames, and the messages they carry.

A frame is an 8-byte little-endian length and that many bytes. Per batch:

- flow -> worker: a pickled :class:`EncodeRequest`, then the batch as an Arrow IPC stream;
- worker -> flow: a pickled :class:`EncodeReply` and five raw frames (key bytes, key offsets,
  value bytes, value offsets, partitions; the numbers as int64), or a pickled
  :class:`EncodeFailure` alone.

The messages are frozen dataclasses of plain values: what crosses the pipe is named, and a
change to it is a change to one class.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa

from producer_lib.errors import EncodeError, ProduceError
from producer_lib.kafka._encode import Constants, EncodingRecipe, Layout

__all__ = ["READY", "EncodeFailure", "EncodeReply", "EncodeRequest", "read_frame", "write_frame"]

_LENGTH = struct.Struct("<Q")
READY = b"ready"  # the first frame: imports done, encoders can be built
REPLY_FRAMES = 5  # raw frames after an EncodeReply


@dataclass(frozen=True)
class EncodeRequest:
    """Encode the batch that follows: with this encoding, these constants, this partition."""

    recipe: EncodingRecipe
    constants: Constants
    partition: int | None


@dataclass(frozen=True)
class EncodeReply:
    """A batch was encoded: its five frames follow.

    Attributes:
        seconds: The worker's time on the batch.
        key_truncations: Key text cut to length, per column (opt-in truncation).
        value_truncations: Value text cut to length, per column.
        layout: Rows per partition and marked rows, computed in the worker.
    """

    seconds: float
    key_truncations: dict[str, int]
    value_truncations: dict[str, int]
    layout: Layout


@dataclass(frozen=True)
class EncodeFailure:
    """Encoding the batch failed: what the flow raises in its stead.

    Attributes:
        kind: The exception's class name.
        message: Its message (an :class:`EncodeError`'s without the context).
        context: An :class:`EncodeError`'s context (table, column, row, key...).
    """

    kind: str
    message: str
    context: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, exc: Exception) -> EncodeFailure:
        """The failure that tells the flow about ``exc``."""
        if isinstance(exc, EncodeError):
            return cls("EncodeError", exc.message, exc.context)
        return cls(type(exc).__name__, str(exc))

    def error(self, topic: str, table: str) -> Exception:
        """The exception to raise in the flow: the same EncodeError, else a ProduceError."""
        if self.kind == "EncodeError":
            return EncodeError(self.message, **self.context)
        return ProduceError(
            f"the encoder process failed: {self.kind}: {self.message}", topic=topic, table=table
        )


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
