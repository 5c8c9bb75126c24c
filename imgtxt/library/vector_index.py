"""Nearest-neighbour search over the photos' vectors, kept in step with SQLite without rewriting what did not change.

SQLite holds every vector (float16, the source of truth); vector_build.py keeps a float32 copy laid out for
search, and this module reads it:

  vectors-<model>-<gen>.vec   written by a full build: ids int64 (N) | vectors float32 (N, D) |
                              centroids float32 (C, D) | cell starts int64 (C + 1); rows sorted by k-means cell
  vectors-<model>-<gen>.add   rows embedded since that build, appended: (id int64, vector float32 (D)) each

Which files are current, their sizes and digests are recorded in SQLite's meta table (the `vec_*` keys). A
search maps a file only when its size and digest match the record (`Record.check`), and otherwise answers exactly
from SQLite's own vectors (slow at a million photos, but right) with a one-line notice for the user, until the
next index run rebuilds. A garbled file would not crash numpy as it crashed Annoy, but its ids and scores would
be nonsense: hence the digest, whole up to 16 MB, 256 sampled blocks above. Every build has a new generation
name, so a search that opened the old files keeps reading them and never sees half a file.

Why float32 on disk: numpy converts float16 at ~2-5 ns an element, which alone would cost a 100k search 120 ms;
a float32 mat-vec over 100k x 512 from the page cache takes ~8 ms of CPU.

Search: up to EXACT_MAX vectors, every vector is scored (single-threaded, ~4 ms of CPU at 50k). Above, rows
are grouped in k-means cells of about CELL_SIZE and a query scores the rows of its best max(MIN_PROBE,
PROBE_FRACTION of the) cells, chosen by recall@10 against exact on vectors fitted to the shipped model's
(bench/vector_search.py). The .add rows are
always scored exactly; when they pass REBUILD_FRACTION of the build, or removed photos do, the next run rebuilds.
Removed photos stay in the files as dead ids: the caller maps ids to paths through SQLite, which drops them,
and asks for `dead` more candidates. A photo re-embedded in place (same id) has a newer .add row that overrides
its old one.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .store import vector_chunks

EXACT_MAX = 50_000       # exact search up to here (~4 ms CPU); cells are 4x cheaper at 100k (bench/vector_search.py)
CELL_SIZE = 1024         # photos per k-means cell above it
MIN_PROBE = 16           # cells scored per query, at least ...
PROBE_FRACTION = 0.08    # ... or this fraction: 1M recall@10 0.971 (6%: 0.953, 4%: 0.923) with the 1024-d default (README)
REBUILD_FRACTION = 0.10  # appended or dead rows beyond this fraction of the build trigger a full rebuild
KMEANS_SAMPLE = 64       # training vectors per cell for k-means (all rows are then assigned)
KMEANS_ITERATIONS = 10
FULL_DIGEST_BYTES = 16 << 20   # files up to this size are hashed whole at each search (~10 ms); larger ones sampled
SAMPLE_BLOCKS, SAMPLE_BYTES = 256, 4096


class DamagedFile(Exception):
    """The vector files do not match what the last index run recorded."""


def file_stem(model_id: str, generation: str) -> str:
    return f"vectors-{re.sub(r'[^A-Za-z0-9_.-]', '_', model_id)}-{generation}"


def main_bytes(count: int, cells: int, dim: int) -> int:
    return count * 8 + count * dim * 4 + cells * dim * 4 + (cells + 1) * 8


def add_row_dtype(dim: int) -> np.dtype:
    return np.dtype([("id", "<i8"), ("vector", "<f4", (dim,))])


# ------------------------------------------------------------------------------------ the record in SQLite

def digest(path: Path, size: int) -> str:
    """sha256 of the file's first `size` bytes when small, else of the size and SAMPLE_BLOCKS blocks spread
    over them (a .add file may hold an unrecorded tail past `size`: it is not read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_DIGEST_BYTES:
            h.update(f.read(size))
            return h.hexdigest()
        h.update(str(size).encode())
        for i in range(SAMPLE_BLOCKS):
            f.seek(i * (size - SAMPLE_BYTES) // (SAMPLE_BLOCKS - 1))
            h.update(f.read(SAMPLE_BYTES))
    return "sampled:" + h.hexdigest()


@dataclass
class Record:
    """What meta says the current files are; `valid_for` checks the files on disk against it."""
    model: str = ""
    file: str = ""
    count: int = 0
    cells: int = 0
    dim: int = 0
    bytes: int = 0
    add: int = 0
    live: int = 0
    max_id: int = 0          # rows after it, or of a later generation, are not in the files yet
    synced_at: str = ""      # (and, for rows of imgtxt versions without generations, embedded at/after this)
    digest: str = ""         # of the .vec file
    add_digest: str = ""     # of the recorded rows of the .add file
    generation: int = 0      # rows of a later write generation are not in the files yet

    @classmethod
    def from_meta(cls, meta: dict) -> "Record":
        try:
            return cls(meta.get("vec_model", ""), meta.get("vec_file", ""), int(meta.get("vec_count", 0)),
                       int(meta.get("vec_cells", 0)), int(meta.get("vec_dim", 0)), int(meta.get("vec_bytes", 0)),
                       int(meta.get("vec_add", 0)), int(meta.get("vec_live", 0)), int(meta.get("vec_max_id", 0)),
                       meta.get("vec_synced_at", ""), meta.get("vec_digest", ""), meta.get("vec_add_digest", ""),
                       int(meta.get("vec_generation", 0)))
        except ValueError:
            return cls()

    def as_meta(self) -> dict:
        return {f"vec_{k}": getattr(self, k) for k in
                ("model", "file", "count", "cells", "dim", "bytes", "add", "live", "max_id", "synced_at",
                 "digest", "add_digest", "generation")}

    def main_path(self, index_dir: Path) -> Path:
        return Path(index_dir) / f"{self.file}.vec"

    def add_path(self, index_dir: Path) -> Path:
        return Path(index_dir) / f"{self.file}.add"

    def add_bytes(self) -> int:
        return self.add * add_row_dtype(self.dim).itemsize

    def check(self, index_dir: Path, model_id: str, dim: int) -> None:
        """Raise DamagedFile unless the files are the ones the last run wrote: recorded for this model and
        dimension, exactly the recorded sizes (the .add file may hold an unrecorded tail), the same digests."""
        if not self.file:
            raise DamagedFile("the index was written by an imgtxt that did not record it" if not self.model
                              else "no vector files were recorded")
        if self.model != model_id or self.dim != dim:
            raise DamagedFile(f"recorded for model {self.model} ({self.dim}-d), not {model_id} ({dim}-d)")
        if self.count <= 0 or self.bytes != main_bytes(self.count, self.cells, dim) or not self.digest \
                or (self.add and not self.add_digest):
            raise DamagedFile("its record in the database is incomplete")
        main, add = self.main_path(index_dir), self.add_path(index_dir)
        try:
            size = os.path.getsize(main)
            add_size = os.path.getsize(add) if self.add else 0
            if size != self.bytes:
                raise DamagedFile(f"{main.name} has {size} bytes, the index run wrote {self.bytes}")
            if add_size < self.add_bytes():
                raise DamagedFile(f"{add.name} has {add_size} bytes, the index run wrote {self.add_bytes()}")
            if digest(main, size) != self.digest or (self.add and digest(add, self.add_bytes()) != self.add_digest):
                raise DamagedFile("their content differs from what the index run wrote")
        except OSError as e:
            raise DamagedFile(f"cannot read them ({e.strerror or e})") from None

    def valid_for(self, index_dir: Path, model_id: str, dim: int) -> bool:
        try:
            self.check(index_dir, model_id, dim)
            return True
        except DamagedFile:
            return False

    @property
    def dead(self) -> int:
        """Entries in the files beyond the live photos: removed photos and superseded rows (an upper bound)."""
        return max(0, self.count + self.add - self.live)


# ------------------------------------------------------------------------------------ searching

def dot_scorer(query: np.ndarray):
    """Cosine scores of unit vectors against `query`, single-threaded: einsum instead of BLAS, whose threads spin
    on a busy machine (a 1,000-row mat-vec took 200x the CPU with 2 OpenBLAS threads under load, bench notes)."""
    q = np.asarray(query, dtype=np.float32).ravel()
    return lambda images: np.einsum("ij,j->i", images, q)



def _top(ids: np.ndarray, scores: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
    if len(scores) > want:
        keep = np.argpartition(-scores, want - 1)[:want]
        ids, scores = ids[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")
    return ids[order], scores[order]


class VectorIndex:
    """The mapped files of one record. `search` returns (ids, scores) best first."""

    def __init__(self, index_dir: Path, record: Record):
        self.record, dim, n, c = record, record.dim, record.count, record.cells
        path = record.main_path(index_dir)
        self.ids = np.memmap(path, "<i8", "r", 0, (n,))
        self.vectors = np.memmap(path, "<f4", "r", n * 8, (n, dim))
        self.centroids = np.array(np.memmap(path, "<f4", "r", n * 8 + n * dim * 4, (c, dim))) if c else None
        self.starts = np.memmap(path, "<i8", "r", n * 8 + (n + c) * dim * 4, (c + 1,)).tolist() if c else None
        self.overridden = np.zeros(0, np.int64)
        if record.add:
            rows = np.memmap(record.add_path(index_dir), add_row_dtype(dim), "r", 0, (record.add,))
            self.add_ids, self.add_vectors = rows["id"], rows["vector"]
            # The latest row of an id wins (a photo re-embedded twice); a copy only when there are repeats.
            latest = len(rows) - 1 - np.unique(rows["id"][::-1], return_index=True)[1]
            if len(latest) < len(rows):
                self.add_ids, self.add_vectors = self.add_ids[latest], self.add_vectors[latest]
            # Ids up to the build's largest were in the build: re-embedded since, their build rows are stale.
            self.overridden = np.sort(self.add_ids[self.add_ids <= int(self.ids.max())])
        else:
            self.add_ids, self.add_vectors = np.zeros(0, np.int64), np.zeros((0, dim), np.float32)

    def __len__(self) -> int:
        return self.record.live

    @property
    def dead(self) -> int:
        return self.record.dead

    def search(self, query: np.ndarray, want: int, score_fn) -> tuple[np.ndarray, np.ndarray]:
        """The `want` best (id, score) by `score_fn` ((M, D) float32 -> (M,) scores, higher is better)."""
        want = max(1, want)
        if self.centroids is None or want * 8 >= len(self.ids):
            ids, scores = self.ids, score_fn(self.vectors)
        else:
            ids, scores = self._probe(want, score_fn)
        ids, scores = _top(np.asarray(ids), np.asarray(scores, np.float32), want + len(self.overridden))
        if len(self.overridden):
            fresh = ~np.isin(ids, self.overridden)
            ids, scores = ids[fresh], scores[fresh]
        if len(self.add_ids):
            ids = np.concatenate([ids, self.add_ids])
            scores = np.concatenate([scores, np.asarray(score_fn(self.add_vectors), np.float32)])
        return _top(ids, scores, want)

    def _probe(self, want: int, score_fn) -> tuple[np.ndarray, np.ndarray]:
        cells, starts = len(self.centroids), self.starts
        order = np.argsort(-score_fn(self.centroids), kind="stable")
        probe = max(MIN_PROBE, math.ceil(PROBE_FRACTION * cells))
        id_parts, score_parts, rows = [], [], 0
        for k, cell in enumerate(order.tolist()):
            if k >= probe and rows >= 2 * want:
                break
            a, b = starts[cell], starts[cell + 1]
            if b > a:
                id_parts.append(self.ids[a:b])
                score_parts.append(score_fn(self.vectors[a:b]))
                rows += b - a
        return np.concatenate(id_parts), np.concatenate(score_parts)


class ExactFromRows:
    """Every vector scored straight from SQLite: the answer when the files are missing or do not match meta."""

    def __init__(self, conn, model_id: str, dim: int):
        self.conn, self.model_id, self.dim = conn, model_id, dim

    def __len__(self) -> int:
        return self.conn.execute("SELECT count(*) FROM photos WHERE model_id = ?", [self.model_id]).fetchone()[0]

    dead = 0

    def search(self, query: np.ndarray, want: int, score_fn) -> tuple[np.ndarray, np.ndarray]:
        best_ids, best_scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        for ids, vectors in vector_chunks(self.conn, self.model_id, self.dim):
            best_ids, best_scores = _top(np.concatenate([best_ids, ids]),
                                         np.concatenate([best_scores, score_fn(vectors)]), max(1, want))
        return best_ids, best_scores


def open_vectors(index_dir: Path, meta: dict, conn, model_id: str, dim: int, notices: list | None = None):
    """The mapped files when they match the record in meta, else exact search from SQLite; why not goes to
    `notices` as one line for the user."""
    record = Record.from_meta(meta)
    try:
        record.check(index_dir, model_id, dim)   # before mapping: never search a file that is not the one written
        return VectorIndex(index_dir, record)
    except (DamagedFile, OSError, ValueError) as e:
        if notices is not None:
            notices.append(f"the vector index {record.file or 'vectors-*'} is damaged or out of date ({e}); "
                           f"answering by exact search, run `imgtxt index FOLDER` to rebuild it")
    return ExactFromRows(conn, model_id, dim)
