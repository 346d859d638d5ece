"""The encoder process: encodes Arrow batches for a flow's send loop, in its own interpreter.

Started by :class:`producer_lib.kafka._encode_process.EncoderProcess` as
``python -m producer_lib.kafka._encode_worker IN_FD OUT_FD``. It shares no GIL with the flow,
so encoding runs beside the send loop instead of taking turns with it. It owns no Kafka client
and no DuckDB connection: batches come in, encoded keys and values go out.

What crosses the pipes is in :mod:`producer_lib.kafka._frames`: an
:class:`~producer_lib.kafka._frames.EncodeRequest` and an Arrow batch in, an
:class:`~producer_lib.kafka._frames.EncodeReply` and five frames (or an
:class:`~producer_lib.kafka._frames.EncodeFailure`) out. The batch is encoded by
:func:`~producer_lib.kafka._encode.encode_batch`, the function the flow's thread uses.

The worker ends when its input pipe closes (the flow's process exited or closed it).
"""

from __future__ import annotations

import os
import pickle
import queue
import sys
import threading
import time
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from producer_lib.kafka._encode import Encoding, EncodingRecipe, encode_batch
from producer_lib.kafka._frames import (
    READY,
    EncodeFailure,
    EncodeReply,
    EncodeRequest,
    read_frame,
    write_frame,
)

__all__ = ["serve"]


class _Encodings:
    """Encodings by recipe, built once per worker."""

    def __init__(self) -> None:
        self._built: dict[EncodingRecipe, Encoding] = {}

    def get(self, recipe: EncodingRecipe) -> Encoding:
        encoding = self._built.get(recipe)
        if encoding is None:
            encoding = self._built[recipe] = Encoding.from_recipe(recipe)
        return encoding


def _encode(encodings: _Encodings, request: EncodeRequest, data: bytes) -> list[Any]:
    """Encode one batch; the reply and its frames."""
    started = time.monotonic()
    batch = pa.ipc.open_stream(data).read_all()
    encoding = encodings.get(request.recipe)
    buffers = encode_batch(encoding, batch, request.constants, request.partition)
    reply = EncodeReply(
        time.monotonic() - started,
        encoding.key_encoder.take_truncations(),
        encoding.value_encoder.take_truncations(),
        buffers.layout(),
    )
    return [
        pickle.dumps(reply),
        buffers.keys,
        buffers.key_offsets,
        buffers.values,
        buffers.value_offsets,
        buffers.partitions,
    ]


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until the input pipe closes.

    A thread reads requests as they come, so the flow's writes never wait for an encode
    (the flow ships a batch while this process encodes the one before).
    """
    requests: queue.Queue[tuple[EncodeRequest, bytes] | None] = queue.Queue()
    threading.Thread(target=_read_requests, args=(inp, requests), daemon=True).start()
    encodings = _Encodings()
    write_frame(out, READY)
    out.flush()
    while (item := requests.get()) is not None:
        request, data = item
        try:
            frames = _encode(encodings, request, data)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the flow, named
            frames = [pickle.dumps(EncodeFailure.of(exc))]
        for frame in frames:
            write_frame(
                out, np.ascontiguousarray(frame) if isinstance(frame, np.ndarray) else frame
            )
        out.flush()


def _read_requests(
    inp: BinaryIO, requests: queue.Queue[tuple[EncodeRequest, bytes] | None]
) -> None:
    try:
        while True:
            request = pickle.loads(read_frame(inp))
            requests.put((request, read_frame(inp)))
    except EOFError:
        requests.put(None)


def main(argv: list[str]) -> None:
    in_fd, out_fd = int(argv[0]), int(argv[1])
    with os.fdopen(in_fd, "rb") as inp, os.fdopen(out_fd, "wb") as out:
        try:
            serve(inp, out)
        except BrokenPipeError:  # the flow went away mid-reply
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
