"""The encoder process: encodes Arrow batches for a flow's send loop, in its own interpreter.

Started by :class:`producer_lib.kafka._encode_process.EncoderProcess` as
``python -m producer_lib.kafka._encode_worker IN_FD OUT_FD``. It shares no GIL with the flow,
so encoding runs beside the send loop instead of taking turns with it. It owns no Kafka client
and no DuckDB connection: batches come in, encoded keys and values go out.

Frames on both pipes are an 8-byte little-endian length and that many bytes. Per batch:

- in: a pickled request ``(spec, constants, partition)``, then the batch as an Arrow IPC stream;
- out: a pickled reply ``("ok", encode_seconds, key_truncations, value_truncations,
  (rows_per_partition, marked_rows))`` and five
  raw frames (key bytes, key offsets, value bytes, value offsets, partitions; numpy int64), or
  ``("error", kind, message, context)``.

The worker ends when its input pipe closes (the flow's process exited or closed it).
"""

from __future__ import annotations

import os
import pickle
import queue
import sys
import threading
import time
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from producer_lib.errors import EncodeError
from producer_lib.kafka._frames import READY, read_frame, write_frame
from producer_lib.kafka._send import marked_rows
from producer_lib.kafka.partitioner import partitions_for_keys
from producer_lib.schema.encoder import AvroEncoder

__all__ = ["serve"]

Recipe = tuple[str, bool]  # AvroEncoder.recipe: schema JSON text, truncate_text


class _Encoders:
    """Encoders by recipe, built once per worker."""

    def __init__(self) -> None:
        self._built: dict[Recipe, AvroEncoder] = {}

    def get(self, recipe: Recipe) -> AvroEncoder:
        encoder = self._built.get(recipe)
        if encoder is None:
            encoder = self._built[recipe] = AvroEncoder.from_recipe(recipe)
        return encoder


def _encode(encoders: _Encoders, request: tuple, data: bytes) -> list[bytes | np.ndarray]:
    """Encode one batch; the reply frames."""
    (key_recipe, value_recipe, key_header, value_header, partitions), constants, partition = request
    started = time.monotonic()
    batch = pa.ipc.open_stream(data).read_all()
    key_encoder, value_encoder = encoders.get(key_recipe), encoders.get(value_recipe)
    keys = key_encoder.encode_buffer(batch, constants[0], key_header)
    values = value_encoder.encode_buffer(batch, constants[1], value_header)
    if partition is None:
        parts = partitions_for_keys(keys[0], keys[1], partitions)
    else:
        parts = np.full(batch.num_rows, partition, dtype=np.int64)
    seconds = time.monotonic() - started
    truncated = (key_encoder.take_truncations(), value_encoder.take_truncations())
    counts = np.bincount(parts, minlength=partitions).tolist()
    layout = ({p: n for p, n in enumerate(counts) if n}, marked_rows(parts))
    reply = pickle.dumps(("ok", seconds, *truncated, layout))
    return [reply, keys[0], keys[1].astype(np.int64), values[0], values[1].astype(np.int64), parts]


def _error_reply(exc: Exception) -> bytes:
    if isinstance(exc, EncodeError):
        return pickle.dumps(("error", "EncodeError", exc.message, exc.context))
    return pickle.dumps(("error", type(exc).__name__, str(exc), {}))


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until the input pipe closes.

    A thread reads requests as they come, so the flow's writes never wait for an encode
    (the flow ships a batch while this process encodes the one before).
    """
    requests: queue.Queue[tuple[tuple, bytes] | None] = queue.Queue()
    threading.Thread(target=_read_requests, args=(inp, requests), daemon=True).start()
    encoders = _Encoders()
    write_frame(out, READY)
    out.flush()
    while (item := requests.get()) is not None:
        request, data = item
        try:
            frames = _encode(encoders, request, data)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the flow, named
            frames = [_error_reply(exc)]
        for frame in frames:
            write_frame(
                out, np.ascontiguousarray(frame) if isinstance(frame, np.ndarray) else frame
            )
        out.flush()


def _read_requests(inp: BinaryIO, requests: queue.Queue[tuple[tuple, bytes] | None]) -> None:
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
