"""A model's safetensors file, read lazily: tensors are views into the memory-mapped file, converted only when
and where they are used (int8 matrices carry per-row scales, `<name>.scale`)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


class LazyTensors:
    """name -> float array from a memory-mapped safetensors file, read on first access (int8 ones dequantized)."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self.path = path
        self._file = safe_open(str(path), framework="numpy")  # validates the file; names; fallback reads
        self._names = set(self._file.keys())
        self._views = _mapped_views(path)

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def keys(self):
        return self._names

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._file.get_slice(name).get_shape())

    def stored(self, name: str) -> np.ndarray:
        """As stored (fp16 / int8 / fp32); read-only when it is a view of the file."""
        view = self._views.get(name)
        return view if view is not None else self._file.get_tensor(name)

    def __getitem__(self, name: str) -> np.ndarray:
        value = self.stored(name)
        if name + ".scale" in self._names:
            return value.astype(np.float32) * self.stored(name + ".scale")[:, None]
        return value

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        """Some rows as fp32, without converting the whole matrix."""
        value = self.stored(name)[index].astype(np.float32)
        if name + ".scale" in self._names:
            value *= self.stored(name + ".scale")[index][..., None]
        return value


_VIEW_DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "I64": np.int64, "I32": np.int32}


def _mapped_views(path: Path) -> dict[str, np.ndarray]:
    """Read-only views into the memory-mapped file, by tensor name (the format: an 8-byte little-endian header
    length, a JSON header of dtype / shape / data_offsets, the data). safetensors' numpy API copies every tensor
    out, and a cold search touches 10 MB of int8 weights once: the copies' page faults cost as much as the reading.
    Tensors of other dtypes, or a file this does not understand, are left to safetensors (`get_tensor`)."""
    import mmap

    try:
        with open(path, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return {}
    views, base = {}, 8 + header_len
    for name, info in header.items():
        dtype = _VIEW_DTYPES.get(info.get("dtype")) if isinstance(info, dict) else None
        if dtype is None:
            continue
        start, end = info["data_offsets"]
        count = (end - start) // np.dtype(dtype).itemsize
        if count != math.prod(info["shape"]) or base + end > len(buffer):
            return {}
        views[name] = np.frombuffer(buffer, dtype, count, base + start).reshape(info["shape"])
    return views


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: x ~ q * scale[:, None]."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.abs(x).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    return np.round(x / scale[:, None]).astype(np.int8), scale.astype(np.float32)


# float32 elements of the cast block: 192 KB, which stays in a core's L2 cache. Sized in elements, not rows:
# 128 rows of MiniLM's 1,536-wide output matrix (768 KB) took 2.7x the CPU of 32 rows (bench/warm_search.py).
INT8_BLOCK_ELEMENTS = 128 * 384


def int8_matmul(x: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x @ (q * scale[:, None]).T for int8 rows q (out, in), cast a block of rows at a time into one small
    reused buffer: casting a whole matrix first allocates its float32 copy, whose first-touch page faults cost
    more than the product for a query of a few tokens (the 36 MiniLM matrices: 42 MB a cold search)."""
    x = np.asarray(x, np.float32)
    rows = q.shape[0]
    step = max(1, INT8_BLOCK_ELEMENTS // max(1, q.shape[1]))
    out = np.empty((x.shape[0], rows), np.float32)
    block = np.empty((min(step, rows), q.shape[1]), np.float32)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        part = block[:stop - start]
        np.copyto(part, q[start:stop], casting="unsafe")
        out[:, start:stop] = x @ part.T
    out *= scale
    return out


# A query's few tokens (rows of x) make a product that OpenBLAS runs at a fraction of its speed with the weight as
# the right-hand operand transposed; up to SMALL_BATCH rows the weight goes on the left (first call) or, kept as
# int8 column blocks of W.T, on the right untransposed (later calls): 0.55-0.7x the CPU of int8_matmul for a
# 12-token MiniLM query (bench/warm_search.py, docs/performance.md). Larger batches (captions) gain nothing.
SMALL_BATCH = 64
# Calls of a matrix before it keeps its int8 column blocks (12 MB for MiniLM and the head: a one-shot search, the
# CLI, encodes one query and would pay the strided copy for nothing).
KEEP_AFTER_CALLS = 2


def _weight_left(x: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8_matmul computed as (W @ x.T).T, the cast int8 block the left operand."""
    rows = q.shape[0]
    step = max(1, INT8_BLOCK_ELEMENTS // max(1, q.shape[1]))
    out = np.empty((rows, x.shape[0]), np.float32)
    block = np.empty((min(step, rows), q.shape[1]), np.float32)
    xt = np.ascontiguousarray(x.T)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        part = block[:stop - start]
        np.copyto(part, q[start:stop], casting="unsafe")
        np.matmul(part, xt, out=out[start:stop])
    out = out.T * scale
    return out


def _column_blocks(q: np.ndarray) -> list[np.ndarray]:
    """W.T as contiguous int8 blocks of INT8_BLOCK_ELEMENTS: (in, step) each."""
    step = max(1, INT8_BLOCK_ELEMENTS // max(1, q.shape[1]))
    return [np.ascontiguousarray(q[start:start + step].T) for start in range(0, q.shape[0], step)]


def _blocks_right(x: np.ndarray, blocks: list[np.ndarray], scale: np.ndarray) -> np.ndarray:
    """x @ W.T from _column_blocks, each cast into one reused float32 buffer."""
    out = np.empty((x.shape[0], len(scale)), np.float32)
    buffer = np.empty(blocks[0].shape, np.float32)
    start = 0
    for block in blocks:
        width = block.shape[1]
        part = buffer[:, :width]
        np.copyto(part, block, casting="unsafe")
        np.matmul(x, part, out=out[:, start:start + width])
        start += width
    out *= scale
    return out


class Dense:
    """x @ W.T for an (out, in) matrix as the model stores it: int8 rows with their per-row `scale` (cast block by
    block, never a whole float32 copy), or float32 (scale None). A query's few rows go the ways SMALL_BATCH says,
    keeping the int8 column blocks from the KEEP_AFTER_CALLS-th call when `keep`; the outputs agree with
    int8_matmul's to float32 rounding (tests/test_text_encoders.py)."""

    def __init__(self, matrix: np.ndarray, scale: np.ndarray | None = None, keep: bool = True):
        self.matrix, self.scale = matrix, None if scale is None else np.asarray(scale, np.float32)
        self.shape = matrix.shape
        self._calls, self._blocks, self._keep = 0, None, keep

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float32)
        if self.scale is None:
            return x @ self.matrix.T   # a transposed view: BLAS reads either layout
        if x.shape[0] > SMALL_BATCH or not self._keep:
            return int8_matmul(x, self.matrix, self.scale)
        blocks = self._blocks
        if blocks is None:
            self._calls += 1
            if self._calls < KEEP_AFTER_CALLS:
                return _weight_left(x, self.matrix, self.scale)
            blocks = self._blocks = _column_blocks(self.matrix)
        return _blocks_right(x, blocks, self.scale)

    def release(self) -> None:
        """Let the kept int8 column blocks go (kept again on the next small batch)."""
        self._blocks = None

    @property
    def kept_bytes(self) -> int:
        return sum(block.nbytes for block in self._blocks or ())
