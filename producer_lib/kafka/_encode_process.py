"""Encoding beside the send loop: a second Python process for large exports.

Encoding (numpy and Arrow calls) and the send loop (a ``produce()`` call per row) cannot run
side by side in one process: every numpy call must take the GIL back from the send loop, which
holds it without pause, and waits for the interpreter's switch interval each time. Measured,
a worker thread bought nothing over encoding in turn (docs/PERFORMANCE.md, "Export to Kafka").
An :class:`EncoderProcess` has an interpreter of its own (``producer_lib.kafka._encode_worker``):
a shipper thread reads DuckDB batches and ships each to the process (both wait mostly
outside the GIL), the caller's thread takes the encoded keys, values and partitions back in
order and sends rows.

:class:`ExportEncoding` is the policy of one export: batches are encoded in the caller's
thread until the export has passed ``after_rows`` rows (most exports are small and never pay
for a process), then the process-wide encoder is started in the background, and once it is
ready the rest of the export goes through it. Once it runs, later exports use it from their
first batch. One export uses the process at a time; another export meanwhile encodes in its
own thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from producer_lib.errors import ProduceError
from producer_lib.kafka._encode import Constants, EncodedBuffers, encode_batch
from producer_lib.kafka._frames import (
    READY,
    REPLY_FRAMES,
    EncodeFailure,
    EncodeReply,
    EncodeRequest,
    read_frame,
    write_frame,
)
from producer_lib.kafka._send import EncodedBatch
from producer_lib.kafka._target import Target

__all__ = ["EncoderProcess", "ExportEncoding"]

log = logging.getLogger(__name__)

Timed = Callable[[str, float], None]

PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size
AHEAD = 2  # batches shipped to the worker before the first is sent: one encodes, one waits
_STOP_WAIT_S = 5.0  # a worker asked to end gets this long before it is killed


class EncoderProcess:
    """A worker process that encodes batches; started at construction, ready a little later.

    Not thread-safe: one export at a time (see :meth:`shared`).
    """

    _shared: EncoderProcess | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        to_worker, self._in_fd = os.pipe()
        self._out_fd, from_worker = os.pipe()
        for fd in (self._in_fd, self._out_fd):
            _widen(fd)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "producer_lib.kafka._encode_worker"]
                + [str(to_worker), str(from_worker)],
                pass_fds=(to_worker, from_worker),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            for fd in (self._in_fd, self._out_fd):
                os.close(fd)
            raise
        finally:
            os.close(to_worker)
            os.close(from_worker)
        self._to = os.fdopen(self._in_fd, "wb")
        self._from = os.fdopen(self._out_fd, "rb")
        self._ready = False
        self._ready_lock = threading.Lock()
        self.failed_to_start = False
        self.busy = threading.Lock()  # held by the export using the process

    @classmethod
    def shared(cls) -> EncoderProcess:
        """The process-wide encoder (started on first use; a dead one is replaced).

        One that failed to start is kept, never ready: this Python process encodes in the
        flow's thread from then on rather than start a failing worker at every export.
        """
        with cls._shared_lock:
            shared = cls._shared
            if shared is not None and not shared.alive:
                shared.ready()  # one that died before it was ready is marked failed_to_start
            if shared is None or not (shared.alive or shared.failed_to_start):
                cls._shared = shared = cls()
            return shared

    @classmethod
    def shared_is_ready(cls) -> bool:
        """A process-wide encoder runs and is ready (never starts one)."""
        with cls._shared_lock:
            shared = cls._shared
        return shared is not None and shared.alive and shared.ready()

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """The worker has not exited."""
        return self._proc.poll() is None

    def ready(self) -> bool:
        """The worker has started and can take batches (never blocks).

        A worker that exits before it is ready is logged once and never becomes ready: the
        exports go on in the flow's thread.
        """
        with self._ready_lock:
            if self._ready or self.failed_to_start:
                return self._ready
            if select.select([self._from], [], [], 0)[0]:
                try:
                    self._ready = self._read() == READY
                except ProduceError:
                    self.failed_to_start = True
                    log.warning(
                        "the encoder process exited while starting (code %s); exports encode "
                        "in the flow's thread",
                        self._proc.returncode,
                    )
            return self._ready

    def encode(
        self,
        batches: Iterator[pa.RecordBatch],
        target: Target,
        constants: Constants,
        partition: int | None,
        timed: Timed,
    ) -> Iterator[EncodedBatch]:
        """The encoded batches of ``batches``, in order; the next ones are encoded meanwhile.

        A :class:`_Shipper` thread reads each batch and ships it, at most :data:`AHEAD`
        batches ahead of the one the caller sends; the caller's thread alone reads the
        replies. ``timed`` hears of ``encode_process`` (the worker's seconds, beside the
        caller's), ``wait_read`` (the caller waiting for the shipper: DuckDB is the slower
        side) and ``wait_encode`` (waiting for the worker's answer). Closing the iterator
        early stops the shipper and drains what the worker still answers, so it is ready
        for the next export.

        Raises:
            EncodeError: A value does not fit the schema (as the in-thread encoder says it).
            ProduceError: The worker died, or failed otherwise; the export must abort.
        """
        request = pickle.dumps(EncodeRequest(target.encoding.recipe, constants, partition))
        if not self.ready():
            raise ProduceError("the encoder process is not ready (wait for ready())")
        shipper = _Shipper(lambda batch: self._ship(request, batch), batches, AHEAD)
        try:
            while (source := self._next_shipped(shipper, timed)) is not None:
                started = time.monotonic()
                reply, frames = self._reply()
                timed("wait_encode", time.monotonic() - started)
                shipper.answered()
                if isinstance(reply, EncodeFailure):
                    raise reply.error(target.topic, target.table)
                timed("encode_process", reply.seconds)
                target.key_encoder.add_truncations(reply.key_truncations)
                target.value_encoder.add_truncations(reply.value_truncations)
                yield _encoded(target, reply, frames, source)
        finally:
            owed = shipper.stop()
            while owed and self.alive:  # drain: every shipped batch is answered
                owed -= 1
                self._reply()

    def _next_shipped(self, shipper: _Shipper, timed: Timed) -> pa.RecordBatch | None:
        """The next batch the shipper has shipped (None after the last), in order."""
        started = time.monotonic()
        try:
            return shipper.next()
        except BrokenPipeError:
            self._read()  # names the worker's exit (raises)
            raise
        finally:
            timed("wait_read", time.monotonic() - started)

    def _ship(self, request: bytes, batch: pa.RecordBatch) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        write_frame(self._to, request)
        write_frame(self._to, sink.getvalue())
        self._to.flush()

    def _reply(self) -> tuple[EncodeReply | EncodeFailure, list[bytes]]:
        """The worker's next answer: a failure, or a batch's reply with its frames."""
        reply = pickle.loads(self._read())
        if isinstance(reply, EncodeFailure):
            return reply, []
        return reply, [self._read() for _ in range(REPLY_FRAMES)]

    def _read(self) -> bytes:
        try:
            return read_frame(self._from)
        except EOFError:
            code = self._proc.wait()
            raise ProduceError(
                f"the encoder process exited (code {code}) in the middle of an export; "
                "the transaction was aborted",
                pid=self._proc.pid,
            ) from None

    def close(self) -> None:
        """End the worker (closing its input ends it; killed if it does not end in time)."""
        for stream in (self._to, self._from):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self._proc.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    @classmethod
    def close_shared(cls) -> None:
        """End the process-wide encoder, if one was started."""
        with cls._shared_lock:
            if cls._shared is not None:
                cls._shared.close()
                cls._shared = None


atexit.register(EncoderProcess.close_shared)


class _Shipper:
    """Reads an export's batches and ships them to the worker, on a thread of its own.

    Reading a DuckDB batch and writing it to the pipe wait mostly outside the GIL, so on
    this thread they overlap the flow's send loop instead of pausing it. At most ``ahead``
    batches are shipped and not yet answered (:meth:`answered`). Only the flow's thread
    reads the worker's replies.
    """

    _END = object()

    def __init__(
        self,
        ship: Callable[[pa.RecordBatch], None],
        batches: Iterator[pa.RecordBatch],
        ahead: int,
    ) -> None:
        self._ship = ship
        self._batches = batches
        self._slots = threading.Semaphore(ahead)
        self._stopping = threading.Event()
        self._shipped: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="encoder-shipper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                self._slots.acquire()
                if self._stopping.is_set():
                    break
                batch = next(self._batches, None)
                if batch is None:
                    break
                self._ship(batch)
                self._shipped.put(batch)
        except BaseException as exc:  # noqa: BLE001 - raised again in the flow's thread
            self._shipped.put(exc)
            return
        self._shipped.put(self._END)

    def next(self) -> pa.RecordBatch | None:
        """The next shipped batch, None after the last; raises what reading or shipping raised."""
        item = self._shipped.get()
        if item is self._END:
            self._shipped.put(item)  # asked again, the answer stays the same
            return None
        if isinstance(item, BaseException):
            self._shipped.put(item)
            raise item
        return item  # type: ignore[no-any-return]

    def answered(self) -> None:
        """The worker answered a shipped batch: there is room for one more."""
        self._slots.release()

    def stop(self) -> int:
        """Stop reading; how many shipped batches were never taken (their answers are owed)."""
        self._stopping.set()
        self._slots.release()
        self._thread.join()
        owed = 0
        while not self._shipped.empty():
            item = self._shipped.get_nowait()
            owed += not (item is self._END or isinstance(item, BaseException))
        return owed


def _widen(fd: int) -> None:
    """Give a pipe the largest buffer Linux allows a user (fewer switches per batch)."""
    try:
        import fcntl

        size = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(size, PIPE_BYTES))
    except (OSError, ValueError, AttributeError):  # not Linux, or refused: the default works
        pass


def _encoded(
    target: Target, reply: EncodeReply, frames: list[bytes], source: pa.RecordBatch
) -> EncodedBatch:
    """The batch of a worker's reply (its layout, counts and marks, computed there)."""
    keys, key_offsets, values, value_offsets, parts = (
        np.frombuffer(frame, dtype=np.uint8 if i in (0, 2) else np.int64)
        for i, frame in enumerate(frames)
    )
    buffers = EncodedBuffers(keys, key_offsets, values, value_offsets, parts, target.partitions)
    return EncodedBatch.from_buffers(buffers, source, reply.layout)


class ExportEncoding:
    """How one export's batches are encoded: in the caller's thread, then in the process.

    Args:
        target: Where the rows go.
        constants: Key and value constants (technical fields).
        partition: Explicit partition of every row, or None.
        after_rows: Rows encoded in the caller's thread before the process is used; None
            never uses it.
        timed: Hears of ``encode`` (in the caller's thread), ``encode_process``,
            ``wait_read`` and ``wait_encode`` (seconds; see :meth:`EncoderProcess.encode`).
    """

    def __init__(
        self,
        target: Target,
        constants: Constants,
        partition: int | None,
        after_rows: int | None,
        timed: Timed,
    ) -> None:
        self._target = target
        self._encoding = target.encoding
        self._constants = constants
        self._partition = partition
        self._after_rows = after_rows
        self._timed = timed

    def batches(self, reader: Iterator[pa.RecordBatch]) -> Iterator[EncodedBatch]:
        """The encoded batches of ``reader``, in order."""
        rows = 0
        encoder: EncoderProcess | None = None
        batches = iter(reader)
        try:
            for batch in batches:
                if encoder is None and self._wants_process(rows):
                    encoder = _take_shared()
                if encoder is not None and encoder.ready():
                    yield from self._in_process(encoder, batch, batches)
                    return
                started = time.monotonic()
                buffers = encode_batch(self._encoding, batch, self._constants, self._partition)
                encoded = EncodedBatch.from_buffers(buffers, batch)
                self._timed("encode", time.monotonic() - started)
                rows += batch.num_rows
                yield encoded
        finally:
            if encoder is not None:
                encoder.busy.release()

    def _wants_process(self, rows: int) -> bool:
        """Past ``after_rows``, or the process already runs (a warm one costs nothing)."""
        if self._after_rows is None:
            return False
        return rows >= self._after_rows or EncoderProcess.shared_is_ready()

    def _in_process(
        self, encoder: EncoderProcess, first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]
    ) -> Iterator[EncodedBatch]:
        def remaining() -> Iterator[pa.RecordBatch]:
            yield first
            yield from rest

        yield from encoder.encode(
            remaining(), self._target, self._constants, self._partition, self._timed
        )


def _take_shared() -> EncoderProcess | None:
    """The process-wide encoder if no other export is using it, else None.

    None as well where no worker can be started (not POSIX, or starting a process failed:
    logged once); exports then encode in the flow's thread.
    """
    global _UNAVAILABLE
    if _UNAVAILABLE:
        return None
    try:
        encoder = EncoderProcess.shared()
    except (OSError, ValueError) as exc:
        _UNAVAILABLE = True
        log.warning("no encoder process (%s); exports encode in the flow's thread", exc)
        return None
    return encoder if encoder.busy.acquire(blocking=False) else None


_UNAVAILABLE = os.name != "posix"  # pipes passed by descriptor and select() on them: POSIX
