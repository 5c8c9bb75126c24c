"""Nearest-neighbour search over the photos' vectors, kept in step with SQLite without rewriting what did not change.

SQLite holds every vector (float16, the source of truth); this module keeps a float32 copy laid out for search:

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
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .store import now_precise, vector_chunks

EXACT_MAX = 50_000       # exact search up to here (~4 ms CPU); cells are 4x cheaper at 100k (bench/vector_search.py)
CELL_SIZE = 1024         # photos per k-means cell above it
MIN_PROBE = 16           # cells scored per query, at least ...
PROBE_FRACTION = 0.06    # ... or this fraction: recall@10 0.970 at 100k, 0.964 at 1M; 4% gave 0.941 at 1M (README)
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
    max_id: int = 0          # rows after it, or embedded at/after synced_at, are not in the files yet
    synced_at: str = ""
    digest: str = ""         # of the .vec file
    add_digest: str = ""     # of the recorded rows of the .add file

    @classmethod
    def from_meta(cls, meta: dict) -> "Record":
        try:
            return cls(meta.get("vec_model", ""), meta.get("vec_file", ""), int(meta.get("vec_count", 0)),
                       int(meta.get("vec_cells", 0)), int(meta.get("vec_dim", 0)), int(meta.get("vec_bytes", 0)),
                       int(meta.get("vec_add", 0)), int(meta.get("vec_live", 0)), int(meta.get("vec_max_id", 0)),
                       meta.get("vec_synced_at", ""), meta.get("vec_digest", ""), meta.get("vec_add_digest", ""))
        except ValueError:
            return cls()

    def as_meta(self) -> dict:
        return {f"vec_{k}": getattr(self, k) for k in
                ("model", "file", "count", "cells", "dim", "bytes", "add", "live", "max_id", "synced_at",
                 "digest", "add_digest")}

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


# ------------------------------------------------------------------------------------ building

def kmeans(sample: np.ndarray, cells: int, spherical: bool, seed: int = 0) -> np.ndarray:
    """Lloyd's k-means (spherical: unit centroids, for cosine) on a sample; empty cells are re-seeded."""
    rng = np.random.default_rng(seed)
    centroids = sample[rng.choice(len(sample), cells, replace=False)].copy()
    for _ in range(KMEANS_ITERATIONS):
        assign = nearest_cell(sample, centroids)
        counts = np.bincount(assign, minlength=cells)
        order = np.argsort(assign, kind="stable")
        filled = np.flatnonzero(counts)
        centroids = sample[rng.choice(len(sample), cells, replace=False)].copy()   # empty cells: re-seeded
        centroids[filled] = (np.add.reduceat(sample[order], np.searchsorted(assign[order], filled))
                             / counts[filled][:, None])
        if spherical:
            centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    return centroids


def nearest_cell(x: np.ndarray, centroids: np.ndarray, chunk: int = 16384) -> np.ndarray:
    """argmin of Euclidean distance (= argmax of cosine for unit centroids), in chunks to bound memory."""
    half_norms = 0.5 * np.square(centroids).sum(axis=1)
    return np.concatenate([np.argmax(np.asarray(x[s:s + chunk]) @ centroids.T - half_norms, axis=1)
                           for s in range(0, len(x), chunk)]) if len(x) else np.zeros(0, np.int64)


def cells_for(count: int) -> int:
    return 0 if count <= EXACT_MAX else max(MIN_PROBE, round(count / CELL_SIZE))


def write_build(index_dir: Path, stem: str, chunks, model_id: str, dim: int, count: int, spherical: bool) -> Record:
    """Write `<stem>.vec` from `chunks` ((ids, float32 vectors) pairs, `count` rows in all); returns its record."""
    cells = cells_for(count)
    size = main_bytes(count, cells, dim)
    final = Path(index_dir) / f"{stem}.vec"
    tmp = Path(index_dir) / f"{stem}.vec.tmp"
    with _private_open(tmp) as f:
        f.truncate(size)
    ids = np.memmap(tmp, "<i8", "r+", 0, (count,))
    vectors = np.memmap(tmp, "<f4", "r+", count * 8, (count, dim))
    unsorted = vectors
    if cells:  # stream into a scratch file first: rows are placed by cell once all are assigned
        scratch = Path(index_dir) / f"{stem}.scratch"
        with _private_open(scratch) as f:
            f.truncate(count * (8 + dim * 4))
        unsorted_ids = np.memmap(scratch, "<i8", "r+", 0, (count,))
        unsorted = np.memmap(scratch, "<f4", "r+", count * 8, (count, dim))
    row = 0
    for chunk_ids, chunk in chunks:
        if row + len(chunk_ids) > count:
            raise RuntimeError("photos were added while the vector index was built")
        (unsorted_ids if cells else ids)[row:row + len(chunk_ids)] = chunk_ids
        unsorted[row:row + len(chunk_ids)] = chunk
        row += len(chunk_ids)
    if row != count:
        raise RuntimeError("photos were removed while the vector index was built")
    if cells:
        rng = np.random.default_rng(count)
        sample_rows = np.sort(rng.choice(count, min(count, KMEANS_SAMPLE * cells), replace=False))
        centroids = kmeans(np.asarray(unsorted[sample_rows]), cells, spherical)
        assign = nearest_cell(unsorted, centroids)
        order = np.argsort(assign, kind="stable")
        position = np.empty(count, np.int64)  # read the scratch file in order, write each row where its cell is
        position[order] = np.arange(count)
        for s in range(0, count, 65536):
            vectors[position[s:s + 65536]] = unsorted[s:s + 65536]
            ids[position[s:s + 65536]] = unsorted_ids[s:s + 65536]
        np.memmap(tmp, "<f4", "r+", count * 8 + count * dim * 4, (cells, dim))[:] = centroids
        np.memmap(tmp, "<i8", "r+", count * 8 + (count + cells) * dim * 4, (cells + 1,))[:] = \
            np.concatenate([[0], np.cumsum(np.bincount(assign, minlength=cells))])
        del unsorted, unsorted_ids
        scratch.unlink()
    vectors.flush()
    ids.flush()
    del ids, vectors
    _fsync(tmp)
    record = Record(model_id, stem, count, cells, dim, size, 0, count, digest=digest(tmp, size))
    os.replace(tmp, final)
    return record


def _private_open(path: Path, append: bool = False):
    """Photo vectors are private like the database: new files are created 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), "ab" if append else "wb")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _append(index_dir: Path, record: Record, store, model_id: str) -> int:
    """Append the rows written since the last pass to the .add file (cut back to its recorded length first)."""
    dtype = add_row_dtype(record.dim)
    appended = 0
    with _private_open(record.add_path(index_dir), append=True) as f:
        f.truncate(record.add * dtype.itemsize)  # an earlier run may have died after appending
        for ids, vectors in vector_chunks(store.db.conn, model_id, record.dim, (record.max_id, record.synced_at)):
            rows = np.empty(len(ids), dtype)
            rows["id"], rows["vector"] = ids, vectors
            f.write(rows.tobytes())
            appended += len(ids)
        f.flush()
        os.fsync(f.fileno())
    return appended


@dataclass
class Synced:
    action: str          # "unchanged", "appended", "rebuilt" or "empty"
    live: int
    rows: int = 0        # rows written
    seconds: float = 0.0
    reason: str = ""

    def line(self) -> str:
        if self.action == "appended":
            return f"vector index: appended {self.rows} photos ({self.seconds:.1f} s)"
        if self.action == "rebuilt":
            return f"vector index: rebuilt from {self.rows} photos because {self.reason} ({self.seconds:.1f} s)"
        return f"vector index: {self.action}"


def sync(store, model_id: str, dim: int, similarity: str) -> Synced:
    """Bring the files in step with SQLite after an index run, writing only what changed.

    Nothing is written when no vector changed (SQLite's `vectors_dirty` flag, set with every vector written,
    is clear and the files match their record); new and re-embedded rows are appended; a full rebuild happens
    for a new model, missing or damaged files, a build crossing EXACT_MAX, or too many appended/dead rows.
    """
    start = time.perf_counter()
    index_dir = store.index_dir
    meta = store.meta()
    record = Record.from_meta(meta)
    live = store.count_photos(model_id)
    dirty = meta.get("vectors_dirty", "1") != "0"
    valid = record.valid_for(index_dir, model_id, dim)
    synced_at = now_precise()
    max_id = store.db.execute("SELECT max(id) FROM photos").fetchone()[0] or 0
    if live == 0:
        store.set_meta(**Record(model_id, "", dim=dim, max_id=max_id, synced_at=synced_at).as_meta(),
                       vectors_dirty=0)
        _remove_other_files(index_dir, keep="")
        return Synced("empty", 0)
    removed = max(0, record.count + record.add - live) - record.add   # as `new.dead - new.add` below
    if valid and not dirty and removed <= REBUILD_FRACTION * record.count:
        if record.live != live:  # photos were removed: only the count changes, the files do not
            record.live = live
            store.set_meta(vec_live=live)
        return Synced("unchanged", live)
    reason = ("the model changed" if record.model and record.model != model_id else
              "there was none" if not record.file else "its files did not match the database" if not valid else "")
    if not reason:
        appended = _append(index_dir, record, store, model_id)
        new = Record(**{**record.__dict__, "add": record.add + appended, "live": live, "max_id": max_id,
                        "synced_at": synced_at})
        new.add_digest = digest(new.add_path(index_dir), new.add_bytes())
        if cells_for(new.count + new.add) > 0 and new.cells == 0:
            reason = f"{new.count + new.add} photos are past exact search ({EXACT_MAX})"
        elif new.add > REBUILD_FRACTION * new.count:
            reason = f"{new.add} photos were added or changed since the last build of {new.count}"
        elif new.dead - new.add > REBUILD_FRACTION * new.count:
            reason = f"{new.dead - new.add} of its {new.count} photos were removed"
        else:
            store.set_meta(**new.as_meta(), vectors_dirty=0)
            return Synced("appended", live, appended, time.perf_counter() - start)
    stem = file_stem(model_id, secrets.token_hex(4))
    try:
        new = write_build(index_dir, stem, vector_chunks(store.db.conn, model_id, dim), model_id, dim, live,
                          similarity == "cosine")
    except BaseException:
        for leftover in Path(index_dir).glob(f"{stem}.*"):
            leftover.unlink(missing_ok=True)
        raise
    new.max_id, new.synced_at = max_id, synced_at
    store.set_meta(**new.as_meta(), vectors_dirty=0)
    _remove_other_files(index_dir, keep=stem)
    return Synced("rebuilt", live, live, time.perf_counter() - start, reason)


def _remove_other_files(index_dir: Path, keep: str) -> None:
    """Older generations, other models' files and Annoy files of earlier imgtxt versions."""
    for path in Path(index_dir).glob("vectors-*"):
        if not keep or not path.name.startswith(keep + "."):
            path.unlink(missing_ok=True)
