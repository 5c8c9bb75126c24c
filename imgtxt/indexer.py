"""One incremental `imgtxt index` run: scan, compare with the database, embed what is new, update the search files.

- unchanged (same size and mtime, same model): not opened at all;
- new or changed: hashed; a hash already in the index (a moved, renamed or copied photo) reuses the stored
  vector, otherwise the photo is decoded (in worker threads, ahead of the CNN) and embedded in batches;
- gone from disk: removed. A photo whose old path is gone and whose content reappears elsewhere is a move.
Every batch is one SQLite transaction, so `kill -9` loses at most the batch in flight; the rerun sees the
committed photos as unchanged. The vector search files follow SQLite at the end of a complete run, writing
only what changed (vector_index.sync).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import vector_index
from .images import ImageError, in_order, load_rgb, register_heif
from .scan import Found, Problem, scan
from .store import Store, StoreError, encode_vector, is_under, now_iso, path_key, real_path


@dataclass
class Summary:
    added: int = 0
    updated: int = 0
    moved: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)       # path key -> reason (all bad files under the roots)
    new_skips: list[tuple[str, str]] = field(default_factory=list)  # reported during this run
    embedded: int = 0                                              # photos that went through the CNN
    indexed: int = 0                                               # photos searchable after the run
    model_note: str = ""
    vector_index: str = ""                                         # what the run did to the search files

    def reason_counts(self) -> Counter:
        return Counter(reason.split(" (")[0] for reason in self.skipped.values())

    def as_dict(self) -> dict:
        return {"added": self.added, "updated": self.updated, "moved": self.moved, "removed": self.removed,
                "unchanged": self.unchanged, "skipped": len(self.skipped), "embedded": self.embedded,
                "indexed": self.indexed, "skipped_reasons": dict(self.reason_counts()),
                "vector_index": self.vector_index}

    def line(self) -> str:
        text = (f"{self.added} added, {self.updated} updated, {self.moved} moved, {self.removed} removed, "
                f"{self.unchanged} unchanged, {len(self.skipped)} skipped")
        if self.skipped:
            text += " (" + ", ".join(f"{n} {r}" for r, n in self.reason_counts().most_common()) + ")"
        return text + f"; {self.indexed} photos searchable"


class NoPhotos(StoreError):
    pass


# --------------------------------------------------------------------------------- helpers

def file_hash(path: str) -> str:
    """blake2b of the whole file: any edit changes it, and it is faster than sha256 without SHA CPU extensions."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Work:
    path: str
    size: int
    mtime_ns: int
    existing: dict | None           # the photos row at this path, if any
    hash: str | None = None
    error: str | None = None


def hash_work(work: Work) -> Work:
    try:
        work.hash = file_hash(work.path)
    except OSError as e:
        work.error = "permission denied" if isinstance(e, PermissionError) else f"unreadable ({e.strerror or e})"
    return work


def decode(work: Work, size: int):
    """(square (size, size, 3) uint8, width, height) or an ImageError. Runs in a worker thread."""
    from PIL import Image

    try:
        image = load_rgb(work.path, min_side=size)
        with Image.open(work.path) as header:   # the true size: draft mode decoded a reduced one
            width, height = header.size
        if (image.width < image.height) != (width < height) and image.width != image.height:
            width, height = height, width       # EXIF rotation
        return np.asarray(image.resize((size, size), Image.BILINEAR), dtype=np.uint8), width, height
    except ImageError as e:
        return e
    except OSError as e:
        return ImageError(f"unreadable ({e})")


class IndexLock:
    """One index run at a time per index folder; the lock dies with the process (kill -9 included)."""

    def __init__(self, index_dir: Path):
        self.path = Path(index_dir) / "index.lock"

    def __enter__(self):
        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise StoreError(f"another `imgtxt index` is running on {self.path.parent}; wait for it to finish") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


_EMBEDDERS: dict[str, object] = {}


def embedder_for(model):
    """One ImageEmbedder per model per process (loading the CNN takes seconds)."""
    if model.model_id not in _EMBEDDERS:
        from .pipeline import ImageEmbedder

        _EMBEDDERS[model.model_id] = ImageEmbedder(model)
    return _EMBEDDERS[model.model_id]


# --------------------------------------------------------------------------------- the run

def run_index(index_dir: Path, roots: list[str], model, excludes=(), batch_size: int = 32, workers: int = 2,
              progress: bool = False, log=None, notice=None) -> Summary:
    """Index `roots` into the index folder. `log` gets per-file messages, `notice` the important ones."""
    log = log or (lambda message: print(message, file=sys.stderr))
    roots = [os.path.abspath(r) for r in roots]
    for root in roots:
        if not os.path.exists(root):
            raise StoreError(f"no such folder: {root}")
    register_heif()  # HEIC/HEIF photos when the optional pillow-heif is installed
    Path(index_dir).mkdir(parents=True, exist_ok=True)
    with IndexLock(Path(index_dir)):  # before opening the store: a migration must not race another run
        store = Store(index_dir)
        try:
            run = IndexRun(store, roots, model, batch_size, workers, progress, log, notice or log)
            return run.execute(list(excludes))
        finally:
            store.close()


class IndexRun:
    """The phases of one run, in order; each leaves the database consistent (committed in transactions)."""

    def __init__(self, store: Store, roots, model, batch_size, workers, progress, log, notice):
        self.store, self.roots, self.model, self.model_id = store, roots, model, model.model_id
        self.root_keys = [path_key(r) for r in roots]
        self.batch_size, self.workers, self.progress, self.log, self.notice = batch_size, workers, progress, log, notice
        self.summary = Summary()
        self.writes: list = []     # pending database writes (callables), committed together

    def execute(self, excludes) -> Summary:
        found, problems = self.scan(excludes)
        work, vanished = self.compare(found)
        to_embed = self.reuse_known_content(work, vanished)
        if to_embed:
            self.embed(to_embed)
        self.finish(found, problems, vanished)
        return self.summary

    # ------------------------------------------------------------------ bookkeeping
    def commit(self) -> None:
        with self.store.db.atomic():
            for write in self.writes:
                write()
        self.writes.clear()

    def count_added_or_updated(self, w: Work) -> None:
        if w.existing is None:
            self.summary.added += 1
        else:
            self.summary.updated += 1

    def skip(self, w: Work, reason: str) -> None:
        key = path_key(w.path)
        self.summary.skipped[key] = reason
        self.summary.new_skips.append((key, reason))
        self.log(f"imgtxt: skipped {key}: {reason}")
        if w.existing is not None:
            self.summary.removed += 1
        self.writes.append(lambda: self.store.put_skipped(w.path, reason, w.size, w.mtime_ns))

    # ------------------------------------------------------------------ 1. what is on disk now
    def scan(self, excludes) -> tuple[dict[str, Found], list[Problem]]:
        found: dict[str, Found] = {}
        problems: list[Problem] = []
        for entry in scan(self.roots, excludes):
            if isinstance(entry, Found):
                found[path_key(entry.path)] = entry
            else:
                problems.append(entry)
        return found, problems

    # ------------------------------------------------------------------ 2. compare with the database, opening nothing
    def compare(self, found: dict[str, Found | None]) -> tuple[list[Work], set[str]]:
        # Streamed: a row that matches the disk (nearly every row of a rerun) is counted and dropped, and its
        # scan entry freed (set to None), so a million-photo rerun never holds both sides in memory.
        rows: dict = {}
        for row in self.store.iter_photo_rows():
            entry = found.get(row.path)
            if entry is not None and (entry.size, entry.mtime_ns, self.model_id) == \
                    (row.size, row.mtime_ns, row.model_id):
                self.summary.unchanged += 1
                found[row.path] = None
            else:
                rows[row.path] = row
        skipped = self.store.skipped_rows()
        self.rows, self.old_skips = rows, skipped
        if not found and not any(is_under(k, self.root_keys) for k in rows):
            from .scan import photo_suffixes

            raise NoPhotos(f"no photos under {', '.join(self.roots)} "
                           f"(looked for {', '.join(sorted(photo_suffixes()))})")
        others = self.store.other_model_ids(self.model_id)
        if others:
            self.summary.model_note = (f"the index holds {sum(others.values())} vectors of another model "
                                       f"({', '.join(others)}); re-embedding them with {self.model_id}")
            self.notice(f"imgtxt: {self.summary.model_note}")

        work: list[Work] = []
        for key, entry in found.items():
            if entry is None:
                continue  # unchanged, counted above
            row = rows.get(key)
            old_skip = skipped.get(key)
            if row is None and old_skip and (old_skip["size"], old_skip["mtime_ns"]) == (entry.size, entry.mtime_ns):
                self.summary.skipped[key] = old_skip["reason"]  # known bad and unchanged: not retried
                continue
            work.append(Work(entry.path, entry.size, entry.mtime_ns, row))
        for key, row in rows.items():  # another model's vectors outside these folders: re-embed if the file exists
            if key not in found and row["model_id"] != self.model_id and not is_under(key, self.root_keys):
                path = real_path(key, row["path_bytes"])
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # gone: removed with the other vanished rows
                work.append(Work(path, st.st_size, st.st_mtime_ns, row))
        work_keys = {path_key(w.path) for w in work}
        vanished = {k for k, row in rows.items() if k not in found and k not in work_keys
                    and (is_under(k, self.root_keys) or not os.path.lexists(real_path(k, row["path_bytes"])))}
        return work, vanished

    # ------------------------------------------------------------------ 3. hash; known content keeps its vector
    def reuse_known_content(self, work: list[Work], vanished: set[str]) -> list[Work]:
        """Moves, renames, copies and touched files get the stored vector; returns the photos to embed."""
        known_hashes = self.store.hashes_with_vectors(self.model_id)
        to_embed: list[Work] = []
        for w, _ in in_order(hash_work, work, self.workers, 64):
            if w.error:
                self.skip(w, w.error)
            elif w.hash not in known_hashes:
                to_embed.append(w)
            elif w.existing is not None and w.existing["hash"] == w.hash and w.existing["model_id"] == self.model_id:
                self.summary.unchanged += 1  # touched, same bytes: just note the new mtime
                self.writes.append(lambda w=w: self.store.move_photo(w.existing["id"], w.path, w.size, w.mtime_ns))
            else:
                donors = self.store.rows_with_hash(w.hash, self.model_id)
                moved_from = next((d for d in donors if d["path"] in vanished), None)
                if moved_from is not None:
                    vanished.discard(moved_from["path"])
                    self.summary.moved += 1
                    self.writes.append(
                        lambda w=w, d=moved_from: self.store.move_photo(d["id"], w.path, w.size, w.mtime_ns))
                elif donors:
                    d = donors[0]
                    self.count_added_or_updated(w)
                    self.writes.append(lambda w=w, d=d: self.store.put_photo(
                        w.path, w.size, w.mtime_ns, w.hash, d["width"], d["height"], d["embedding"], self.model_id))
                else:
                    to_embed.append(w)
            if len(self.writes) >= 256:
                self.commit()
        self.commit()
        return to_embed

    # ------------------------------------------------------------------ 4. decode in threads, embed in batches
    def embed(self, to_embed: list[Work]) -> None:
        embedder = embedder_for(self.model)
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(to_embed), unit="photo", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
        batch: list[tuple[Work, tuple]] = []

        def embed_batch():
            if batch:
                squares = np.stack([square for _, (square, _, _) in batch])
                for (w, (_, width, height)), vector in zip(batch, embedder.embed(squares).astype(np.float32)):
                    self.count_added_or_updated(w)
                    self.writes.append(lambda w=w, wd=width, ht=height, v=encode_vector(vector): self.store.put_photo(
                        w.path, w.size, w.mtime_ns, w.hash, wd, ht, v, self.model_id))
                self.summary.embedded += len(batch)
            done = len(self.writes)
            self.commit()  # one transaction per batch: kill -9 loses at most this batch
            if bar is not None:
                bar.update(done)
            batch.clear()

        size = embedder.resize_size
        for w, result in in_order(lambda w: decode(w, size), to_embed, self.workers, 4 * self.batch_size):
            if isinstance(result, ImageError):
                self.skip(w, str(result))
            else:
                batch.append((w, result))
            if len(batch) >= self.batch_size:
                embed_batch()
        embed_batch()
        if bar is not None:
            bar.close()

    # ------------------------------------------------------------------ 5. removals, folder problems, vectors
    def finish(self, found: dict[str, Found], problems: list[Problem], vanished: set[str]) -> None:
        store, summary = self.store, self.summary
        with store.db.atomic():
            store.remove_photos(sorted(vanished))
            summary.removed += len(vanished)
            store.remove_skipped([k for k in self.old_skips if k not in found and is_under(k, self.root_keys)])
            for problem in problems:  # unreadable folders, link loops: re-checked on every run
                key = path_key(problem.path)
                summary.skipped[key] = problem.reason
                if self.old_skips.get(key, {}).get("reason") != problem.reason:
                    summary.new_skips.append((key, problem.reason))
                    self.log(f"imgtxt: skipped {key}: {problem.reason}")
                store.put_skipped(problem.path, problem.reason)
        dim = self.model.config["joint"]["embed_dim"]
        synced = vector_index.sync(store, self.model_id, dim, self.model.similarity_kind)
        summary.indexed, summary.vector_index = synced.live, synced.line()
        if synced.seconds >= 1.0:  # a rebuild of many photos: say why it took a while
            self.log(f"imgtxt: {synced.line()}")
        store.set_meta(model_id=self.model_id, model_folder=str(Path(self.model.folder).resolve()),
                       similarity=self.model.similarity_kind, embed_dim=dim, last_run=now_iso(),
                       photos=summary.indexed)
