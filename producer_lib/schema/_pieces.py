"""Byte pieces of the column-at-a-time Avro encoder and their assembly into rows.

A column encoder turns one Arrow column into one or more *pieces*, each holding one
chunk of bytes per row:

- :class:`MatrixPiece`: a ``(rows, width)`` uint8 matrix and a mask of the bytes that
  belong to each row (varints, fixed-width numbers, union branches, decimals).
- :class:`ArrowPiece`: a ``large_binary`` Arrow array (string and bytes payloads, rows
  encoded per row by fastavro); a null row contributes no bytes.
- :class:`ConstPiece`: the same bytes for every row (constants, headers, absent fields).

:func:`assemble` concatenates the pieces of every field row by row: runs of matrix and
small constant pieces are merged into one matrix and compressed by their mask with
numpy; the remaining pieces are joined in C++ by ``pyarrow.compute.binary_join_element_wise``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# A constant longer than this stays a scalar in the Arrow join instead of being
# repeated into the matrix: repeating it would cost rows x length bytes twice.
_MAX_INLINE_CONST = 16

_EMPTY = pa.scalar(b"", pa.large_binary())


@dataclass(frozen=True)
class MatrixPiece:
    """Per-row bytes in a fixed-width matrix.

    Attributes:
        mat: ``(rows, width)`` uint8 matrix.
        mask: ``(rows, width)`` bool, True for the bytes that belong to the row in order;
            None when every byte belongs to it.
    """

    mat: np.ndarray
    mask: np.ndarray | None = None


@dataclass(frozen=True)
class ArrowPiece:
    """Per-row bytes as a ``large_binary`` array; null rows contribute nothing."""

    arr: pa.Array


@dataclass(frozen=True)
class ConstPiece:
    """The same bytes for every row."""

    data: bytes


Piece = MatrixPiece | ArrowPiece | ConstPiece


def zigzag(values: np.ndarray) -> np.ndarray:
    """Zigzag-map signed 64-bit integers to unsigned, as Avro ``int``/``long`` do.

    Args:
        values: int64 array.

    Returns:
        uint64 array ``(v << 1) ^ (v >> 63)``.
    """
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def varint_piece(unsigned: np.ndarray) -> MatrixPiece:
    """Encode unsigned integers as little-endian base-128 varints.

    Args:
        unsigned: uint64 array (already zigzag-mapped for signed values).

    Returns:
        A matrix piece as wide as the longest varint, masked to each row's length.
    """
    n = len(unsigned)
    top = int(unsigned.max()) if n else 0
    width = max(1, (top.bit_length() + 6) // 7)
    mat = np.empty((n, width), dtype=np.uint8)
    mask = np.empty((n, width), dtype=bool)
    rest = unsigned
    for k in range(width):
        nxt = rest >> np.uint64(7)
        more = nxt != 0
        mat[:, k] = rest & np.uint64(0x7F)
        mat[:, k] |= more.view(np.uint8) << np.uint8(7)
        if k + 1 < width:
            # byte k+1 belongs to the row when byte k says "more follows"
            mask[:, k + 1] = more
        rest = nxt
    if width == 1:
        return MatrixPiece(mat)
    mask[:, 0] = True
    return MatrixPiece(mat, mask)


def long_piece(values: np.ndarray) -> MatrixPiece:
    """Encode signed integers as Avro ``int``/``long`` (zigzag varints)."""
    return varint_piece(zigzag(values))


def with_union(
    pieces: list[Piece], valid: np.ndarray | None, value_code: int, null_code: int
) -> list[Piece]:
    """Prefix the union branch byte and drop the value bytes of null rows.

    Args:
        pieces: The value pieces of every row (null rows hold anything).
        valid: True for non-null rows; None when no row is null.
        value_code: Branch byte of the value type (zigzag of its union index).
        null_code: Branch byte of ``null``.

    Returns:
        The branch piece followed by the masked value pieces.
    """
    if valid is None:
        return [ConstPiece(bytes([value_code])), *pieces]
    branch = np.where(valid, np.uint8(value_code), np.uint8(null_code)).astype(np.uint8)
    out: list[Piece] = [MatrixPiece(branch[:, None])]
    for piece in pieces:
        out.append(_mask_rows(piece, valid))
    return out


def _mask_rows(piece: Piece, valid: np.ndarray) -> Piece:
    if isinstance(piece, MatrixPiece):
        mask = valid[:, None] if piece.mask is None else piece.mask & valid[:, None]
        return MatrixPiece(piece.mat, np.broadcast_to(mask, piece.mat.shape))
    if isinstance(piece, ArrowPiece):
        if piece.arr.null_count == len(valid) - int(np.count_nonzero(valid)):
            return piece  # the payload of the column itself: its nulls are already there
        return ArrowPiece(pc.if_else(pa.array(valid), piece.arr, None))
    const = np.frombuffer(piece.data, dtype=np.uint8)
    mat = np.broadcast_to(const, (len(valid), len(const)))
    return MatrixPiece(mat, np.broadcast_to(valid[:, None], mat.shape))


def assemble(pieces: list[Piece], rows: int) -> pa.Array:
    """Concatenate the pieces row by row.

    Args:
        pieces: Pieces in field order, each covering ``rows`` rows.
        rows: Number of rows.

    Returns:
        A ``large_binary`` array of ``rows`` encoded rows, without nulls.
    """
    merged = _merge_matrices(pieces, rows)
    if not merged:
        return from_parts(np.empty(0, np.uint8), np.zeros(rows, np.int64))
    if len(merged) == 1 and isinstance(merged[0], MatrixPiece):
        return matrix_to_arrow(merged[0])
    args = [
        pa.scalar(p.data, pa.large_binary()) if isinstance(p, ConstPiece) else _as_arrow(p)
        for p in merged
    ]
    if all(isinstance(p, ConstPiece) for p in merged):
        args.append(pa.array([b""] * rows, pa.large_binary()))
    joined = pc.binary_join_element_wise(*args, _EMPTY, null_handling="skip")
    return joined.fill_null(b"") if joined.null_count else joined


def _as_arrow(piece: Piece) -> pa.Array:
    if isinstance(piece, MatrixPiece):
        return matrix_to_arrow(piece)
    assert isinstance(piece, ArrowPiece)
    return piece.arr


def _merge_matrices(pieces: list[Piece], rows: int) -> list[Piece]:
    """Merge each run of matrix pieces and short constants into one matrix piece."""
    out: list[Piece] = []
    run: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, MatrixPiece) or (
            isinstance(piece, ConstPiece) and len(piece.data) <= _MAX_INLINE_CONST
        ):
            run.append(piece)
            continue
        out.extend(_close_run(run, rows))
        run = []
        out.append(piece)
    out.extend(_close_run(run, rows))
    return out


def _close_run(run: list[Piece], rows: int) -> list[Piece]:
    if not run:
        return []
    if all(isinstance(p, ConstPiece) for p in run):
        return [ConstPiece(b"".join(p.data for p in run if isinstance(p, ConstPiece)))]
    mats: list[np.ndarray] = []
    masks: list[np.ndarray | None] = []
    for piece in run:
        if isinstance(piece, ConstPiece):
            const = np.frombuffer(piece.data, dtype=np.uint8)
            mats.append(np.broadcast_to(const, (rows, len(const))))
            masks.append(None)
        elif isinstance(piece, MatrixPiece):
            mats.append(piece.mat)
            masks.append(piece.mask)
    mat = np.concatenate(mats, axis=1) if len(mats) > 1 else mats[0]
    if all(m is None for m in masks):
        return [MatrixPiece(mat)]
    full = [np.ones(a.shape, bool) if m is None else m for a, m in zip(mats, masks, strict=True)]
    mask = np.concatenate(full, axis=1) if len(full) > 1 else full[0]
    return [MatrixPiece(mat, mask)]


def matrix_to_arrow(piece: MatrixPiece) -> pa.Array:
    """Compress a matrix piece into a ``large_binary`` array of its rows."""
    rows, width = piece.mat.shape
    if piece.mask is None:
        data = np.ascontiguousarray(piece.mat).reshape(-1)
        return from_parts(data, np.full(rows, width, dtype=np.int64))
    data = piece.mat[piece.mask]
    return from_parts(data, piece.mask.sum(axis=1, dtype=np.int64))


def from_parts(data: np.ndarray, lengths: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_binary(), len(lengths), buffers)


def to_numpy_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Expose a ``large_binary`` array as (data buffer, int64 offsets), without copying.

    Args:
        arr: A ``large_binary`` array without nulls.

    Returns:
        The uint8 data starting at the first row and ``len(arr) + 1`` offsets into it.
    """
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    if data_buf is None or len(arr) == 0:
        return np.empty(0, np.uint8), np.zeros(len(arr) + 1, np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8)
    start = int(offsets[0])
    return data[start : int(offsets[-1])], offsets - start
