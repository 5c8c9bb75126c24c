"""Writing the search files (see vector_index.py for their layout and how searches read them): a full build
(the float32 matrix; above EXACT_MAX photos also a PCA projection and an Annoy index over it), rows appended since, and `sync`, which after an
index run does only what changed.

Every file is written under a new generation name (or appended past its recorded length) and fsynced before the
record in SQLite points at it, so a search, or a crash at any point, never meets half a file.
"""
from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import (
    vector_index,  # its tuning constants are read through the module, so tests and bench/ can vary them
)
from .store import now_precise, vector_chunks
from .vector_index import Record, add_row_dtype, digest, exact_bytes, file_stem, projected_dim, rows_digest

STAMP_SETTLE_NS = 20_000_000   # stamps are taken this long after a file's last change (twice a 100 Hz tick)


def kind_for(count: int, similarity: str) -> str:
    """Annoy answers by dot product: a model scored otherwise (order embeddings) is searched exactly at any size."""
    return "annoy-pca" if count > vector_index.EXACT_MAX and similarity == "cosine" else "exact"


def _rows(chunks, count: int):
    """(first row, ids, vectors) of each chunk, checking that the photos did not change under the build."""
    row = 0
    for chunk_ids, chunk in chunks:
        if row + len(chunk_ids) > count:
            raise RuntimeError("photos were added while the vector index was built")
        yield row, chunk_ids, chunk
        row += len(chunk_ids)
    if row != count:
        raise RuntimeError("photos were removed while the vector index was built")


def write_build(index_dir: Path, stem: str, chunks, model_id: str, dim: int, count: int,
                kind: str = "exact") -> Record:
    """Write the files of `kind` from `chunks` ((ids, float32 vectors) pairs, `count` rows in all); returns
    their record. Every file goes to a .tmp name and is fsynced, then renamed."""
    index_dir = Path(index_dir)
    tmp = index_dir / f"{stem}.vec.tmp"
    size = exact_bytes(count, dim)
    with _private_open(tmp) as f:
        f.truncate(size)
    ids = np.memmap(tmp, "<i8", "r+", 0, (count,))
    vectors = np.memmap(tmp, "<f4", "r+", count * 8, (count, dim))
    for row, chunk_ids, chunk in _rows(chunks, count):
        ids[row:row + len(chunk_ids)] = chunk_ids
        vectors[row:row + len(chunk_ids)] = chunk
    vectors.flush()
    ids.flush()
    del ids, vectors
    _fsync(tmp)
    record = Record(model_id, stem, "exact", count, 0, dim, size, 0, count, digest=rows_digest(tmp, size))
    if kind != "exact":
        _write_annoy(index_dir, stem, np.memmap(tmp, "<f4", "r", count * 8, (count, dim)), record)
        os.replace(index_dir / f"{stem}.proj.tmp", index_dir / f"{stem}.proj")
        os.replace(index_dir / f"{stem}.ann.tmp", index_dir / f"{stem}.ann")
    os.replace(tmp, index_dir / f"{stem}.vec")
    return record


def fit_projection(vectors: np.ndarray, projected: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean (D,) and the first `projected` principal axes (D, P) of a seeded sample of the rows, float32."""
    n = len(vectors)
    rows = np.sort(np.random.default_rng(seed).choice(n, min(n, vector_index.PROJECTION_SAMPLE), replace=False))
    sample = np.asarray(vectors[rows], np.float64)
    mean = sample.mean(axis=0)
    centred = sample - mean
    values, axes = np.linalg.eigh(centred.T @ centred)
    basis = axes[:, np.argsort(-values, kind="stable")[:projected]]
    return mean.astype(np.float32), np.ascontiguousarray(basis, dtype=np.float32)


def _write_annoy(index_dir: Path, stem: str, vectors: np.ndarray, record: Record, chunk: int = 65_536) -> None:
    """The .proj and the .ann (as .tmp files, fsynced) of the build's vectors; fills in `record`."""
    from annoy import AnnoyIndex

    count, dim = vectors.shape
    projected = projected_dim(dim)
    mean, basis = fit_projection(vectors, projected, seed=count)
    proj_tmp, ann_tmp = index_dir / f"{stem}.proj.tmp", index_dir / f"{stem}.ann.tmp"
    with _private_open(proj_tmp) as f:
        f.write(mean.tobytes() + basis.tobytes())
        f.flush()
        os.fsync(f.fileno())
    _private_open(ann_tmp).close()          # created 0600 here: Annoy's open keeps the mode of a file that exists
    index = AnnoyIndex(projected, "dot")
    index.set_seed(count)
    index.on_disk_build(str(ann_tmp))       # nodes grow in the file, not in memory
    for start in range(0, count, chunk):
        for i, item in enumerate((np.asarray(vectors[start:start + chunk]) - mean) @ basis, start):
            index.add_item(i, item)
    trees = vector_index.trees_for(count)
    index.build(trees, n_jobs=vector_index.BUILD_THREADS)
    index.unload()
    del index
    _fsync(ann_tmp)
    ann_bytes = os.path.getsize(ann_tmp)
    record.kind, record.trees, record.projected, record.ann_bytes = "annoy-pca", trees, projected, ann_bytes
    record.ann_digest = digest(ann_tmp, ann_bytes)
    record.proj_digest = digest(proj_tmp, vector_index.projection_bytes(dim, projected))


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
        since = (record.max_id, record.generation, record.synced_at)
        for ids, vectors in vector_chunks(store.db.conn, model_id, record.dim, since):
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
    for a new model, missing or damaged files, files of an earlier version, a build crossing
    vector_index.EXACT_MAX, or too many appended/dead rows; and, in a run that changed vectors, for an Annoy build
    of fewer trees than trees_for gives now (an earlier version's).
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
    generation = store.write_generation()   # every row written so far is at or below it
    if live == 0:
        store.set_meta(**Record(model_id, "", dim=dim, max_id=max_id, synced_at=synced_at,
                                generation=generation).as_meta(), vectors_dirty=0)
        _remove_other_files(index_dir, keep="")
        return Synced("empty", 0)
    removed = max(0, record.count + record.add - live) - record.add   # as `new.dead - new.add` below
    if valid and not dirty and removed <= vector_index.REBUILD_FRACTION * record.count:
        if record.live != live:  # photos were removed: only the count changes, the files do not
            record.live = live
            store.set_meta(vec_live=live)
        stamped = Record(**record.__dict__)   # digests checked just now (valid_for): searches need not
        _stamp(stamped, index_dir)             # (files of an earlier version have no stamps)
        if (stamped.stamps, stamped.add_stamp) != (record.stamps, record.add_stamp):
            store.set_meta(vec_stamps=stamped.stamps, vec_add_stamp=stamped.add_stamp)
        _remove_other_files(index_dir, keep=record.file)
        return Synced("unchanged", live)
    reason = ("the model changed" if record.model and record.model != model_id else
              "there was none" if not record.file else
              "it was written by an earlier version of imgtxt" if record.kind not in vector_index.KINDS else
              "its files did not match the database" if not valid else "")
    if not reason:
        appended = _append(index_dir, record, store, model_id)
        new = Record(**{**record.__dict__, "add": record.add + appended, "live": live, "max_id": max_id,
                        "synced_at": synced_at, "generation": generation})
        new.add_digest = rows_digest(new.add_path(index_dir), new.add_bytes())
        _stamp(new, index_dir)
        if new.kind == "exact" and kind_for(live, similarity) != "exact":   # (an Annoy build that shrinks stays)
            reason = f"{live} photos are past exact search ({vector_index.EXACT_MAX})"
        elif new.kind == "annoy-pca" and new.trees < vector_index.trees_for(new.count):
            # an earlier version's build: a run that writes anyway rebuilds it (~10 s at 100k) for the cheaper query
            reason = (f"its {new.trees} Annoy trees are fewer than this version builds "
                      f"({vector_index.trees_for(new.count)})")
        elif new.add > vector_index.REBUILD_FRACTION * new.count:
            reason = f"{new.add} photos were added or changed since the last build of {new.count}"
        elif new.dead - new.add > vector_index.REBUILD_FRACTION * new.count:
            reason = f"{new.dead - new.add} of its {new.count} photos were removed"
        else:
            store.set_meta(**new.as_meta(), vectors_dirty=0)
            _remove_other_files(index_dir, keep=new.file)
            return Synced("appended", live, appended, time.perf_counter() - start)
    stem = file_stem(model_id, secrets.token_hex(4))
    try:
        new = write_build(index_dir, stem, vector_chunks(store.db.conn, model_id, dim), model_id, dim, live,
                          kind_for(live, similarity))
    except BaseException:
        for leftover in Path(index_dir).glob(f"{stem}.*"):
            leftover.unlink(missing_ok=True)
        raise
    new.max_id, new.synced_at, new.generation = max_id, synced_at, generation
    _stamp(new, index_dir)   # after the renames, which change ctime
    store.set_meta(**new.as_meta(), vectors_dirty=0)
    _remove_other_files(index_dir, keep=stem)
    return Synced("rebuilt", live, live, time.perf_counter() - start, reason)


def _stamp(record: Record, index_dir: Path) -> None:
    """Fill in the files' stamps (vector_index.file_stamp), taken once the clock has moved past their last change:
    timestamps tick at up to ~10 ms, and a write in the same tick as the stamp would leave the same ctime. A file
    system keeping whole seconds (FAT) gets no stamps: searches then hash the files each time."""
    record.stamps = record.add_stamp = ""
    try:
        ctimes = [int(s.rsplit(":", 1)[1]) for s in " ".join(record.current_stamps(index_dir)).split()]
        if any(c % 1_000_000_000 == 0 for c in ctimes):
            return
        wait = max(ctimes) + STAMP_SETTLE_NS - time.time_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        record.stamps, record.add_stamp = record.current_stamps(index_dir)
    except OSError:   # a file vanished: no stamps, searches hash (and find it missing)
        pass


def _remove_other_files(index_dir: Path, keep: str) -> None:
    """Older generations, other models' files and the files of earlier imgtxt versions. Also after a run that
    wrote nothing, so a run killed while removing them leaves none for long. A folder of such a name is not
    a file this wrote: left alone."""
    for path in Path(index_dir).glob("vectors-*"):
        if (not keep or not path.name.startswith(keep + ".")) and (path.is_symlink() or not path.is_dir()):
            path.unlink(missing_ok=True)
