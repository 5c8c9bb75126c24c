"""One incremental `imgtxt index` run: scan, compare with the database, embed what is new, update the search files.

- unchanged (same size and mtime, same model): not opened at all;
- new or changed: hashed; a hash already in the index (a moved, renamed or copied photo) reuses the stored
  vector, otherwise the photo is decoded (in worker threads, ahead of the CNN) and embedded in batches;
- gone from disk: removed. A photo whose old path is gone and whose content reappears elsewhere is a move.
Every batch is one SQLite transaction, so `kill -9` loses at most the batch in flight; the rerun sees the
committed photos as unchanged. The vector search files follow SQLite at the end of a complete run, writing
only what changed (vector_build.sync).

A run only ever touches rows under its own roots: photos of other folders (an unplugged drive) are never
opened nor removed, and a root or a mount point that cannot be reached (missing, a broken link, empty, no
longer mounted) keeps its photos unless `prune=True`: the rule is reach.py's.
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import numpy as np

from imgtxt.model.cnn_runtime import one_blas_thread
from imgtxt.model.images import ImageError, in_order, register_heif
from imgtxt.model.previews import raw_hint
from imgtxt.safe_text import printable

from . import photo_facts, reach, vector_build
from .reach import keeps_row
from .index_folder import COMPLETE as REBUILD_COMPLETE
from .index_folder import (
    IndexLock,
    clear_leftovers,
    finish_interrupted_swap,
    open_rebuild_store,
    swap_in_rebuild,
)
from .index_summary import Summary
from .photo_paths import is_under, path_key
from .photo_work import Work, decode
from .content_reuse import ContentReuse
from .rebuild import PREVIEWS, OldVectors, carry_over, open_old
from .scan import Found, Problem, scan
from .store import (
    NO_VECTOR,
    Store,
    StoreError,
    classify,
    encode_vector,
    make_private_dir,
    now_iso,
    usable_vector,
    write_error,
    write_folders,
)


class NoPhotos(StoreError):
    pass


CNN_BATCH_MAX = 64   # photos per CNN call, whatever --batch-size: memory stays bounded
# Skips that say nothing of the bytes (a chmod back changes neither size nor mtime): tried again on every run.
RETRIED = ("permission denied", "unreadable")


# --------------------------------------------------------------------------------- the run

def run_index(index_dir: Path, roots: list[str], model, excludes=(), batch_size: int = 32, workers: int = 2,
              progress: bool = False, log=None, notice=None, prune: bool = False, rebuild: bool = False,
              ray_address: str | None = None, previews: bool = False) -> Summary:
    """Index `roots` into the index folder. `log` gets per-file messages, `notice` the important ones.

    prune: drop the photos of a root that is missing or empty now. rebuild: build a new database from the
    photos of `roots` into index.db.rebuild (a killed rebuild continues where it stopped), keeping the old
    database's other folders and reusing its vectors by content (rebuild.py), and swap it in only when it is
    complete; the old index.db is kept as index.db.damaged (numbered when that name is taken). ray_address: embed on a Ray cluster (ray_index).
    previews: decode a photo's embedded preview (MPF, EXIF, HEIC thumbnail) when it is large enough."""
    log = log or (lambda message: print(message, file=sys.stderr))
    if ray_address:   # an unreachable cluster is one line now, not minutes of retries after the scan
        from .ray_index import probe

        probe(ray_address)
    roots = [os.path.abspath(r) for r in roots]
    register_heif()  # HEIC/HEIF photos when the optional pillow-heif is installed
    index_dir = Path(index_dir)
    missing = [r for r in roots if not os.path.lexists(r)]
    if missing and not (index_dir / "index.db").exists():  # nothing can be kept for it: a typo, say so now
        raise StoreError(f"no such folder: {missing[0]}")
    try:
        make_private_dir(index_dir)
    except OSError as e:
        raise write_error(index_dir, e) from None
    with IndexLock(index_dir):  # before opening the store: a migration must not race another run
        notice = notice or log
        if finish_interrupted_swap(index_dir):
            notice(f"imgtxt: finished the interrupted rebuild of {index_dir}")
        store = open_rebuild_store(index_dir) if rebuild else Store(index_dir)
        old = None
        try:
            if rebuild:   # the old database's other folders are kept, its vectors reused by content
                conn = open_old(index_dir)
                carry_over(store, conn, [path_key(r) for r in roots], notice)
                old = OldVectors(conn, model.model_id, model.vector_dim, previews)
            else:
                clear_leftovers(index_dir, notice)
            run = IndexRun(store, roots, model, batch_size, workers, progress, log, notice, prune)
            run.old_vectors = old
            run.forgotten = forgotten_under(store, run.root_keys, notice)
            run.ray_address = ray_address  # embed on a Ray cluster (ray_index) instead of this process
            run.previews = previews
            summary = run.execute(list(excludes))
            photo_facts.update(store, run.root_keys, notice or log)   # dates, places, folder words: new files only
            write_folders(store, add=roots)  # under the lock: another run cannot take it before the run is done
            if rebuild:
                store.set_meta(**{REBUILD_COMPLETE: 1})
            store.checkpoint()
        except sqlite3.DatabaseError as e:
            raise classify(e, store.db_path) from None
        finally:
            store.close()
            if old is not None:
                old.close()
        if rebuild:
            if old.reused:
                notice(f"imgtxt: reused {old.reused} vectors of the old index for photos with the same bytes")
            swap_in_rebuild(index_dir)
        return summary


def forgotten_under(store: Store, root_keys: list[str], notice) -> list[str]:
    """The forgotten paths this run leaves out. A forgotten folder given to `index` (itself or a path inside it)
    is indexed again and no longer forgotten."""
    forgotten = store.forgotten()
    lifted = [f for f in forgotten if any(is_under(r, [f]) for r in root_keys)]
    with store.db.atomic():
        store.remove_forgotten(lifted)
    kept = [f for f in forgotten if f not in lifted and is_under(f, root_keys)]
    for key in kept:
        notice(f"imgtxt: left out {printable(key)} (forgotten; `imgtxt index` it by name to bring it back)")
    return kept


class IndexRun(ContentReuse):
    """The phases of one run, in order; each leaves the database consistent (committed in transactions)."""

    forgotten: list[str] = []   # paths under the roots that `imgtxt forget` keeps out

    def __init__(self, store: Store, roots, model, batch_size, workers, progress, log, notice, prune=False):
        self.store, self.roots, self.model, self.model_id = store, roots, model, model.model_id
        self.root_keys = [path_key(r) for r in roots]
        self.prune = prune
        self.batch_size, self.workers, self.progress, self.log, self.notice = batch_size, workers, progress, log, notice
        self.summary = Summary()
        self.writes: list = []     # pending database writes (callables), committed together
        self.stamps: list = []     # (id, inode, ctime_ns) for unchanged rows of earlier versions
        self.previews = False      # decode embedded previews (images.load_rgb)

    def execute(self, excludes) -> Summary:
        found, problems = self.scan(excludes)
        work, vanished = self.compare(found, problems)
        to_embed, copies = self.reuse_known_content(work, vanished)
        if to_embed:
            self.embed(to_embed)
        if copies:
            self.place_copies(copies)
        self.finish(found, problems, vanished)
        return self.summary

    # ------------------------------------------------------------------ bookkeeping
    def commit(self) -> None:
        try:
            with self.store.db.atomic():
                for write in self.writes:
                    write()
        except sqlite3.DatabaseError as e:  # disk full, I/O error: the transaction is rolled back, earlier ones kept
            raise classify(e, self.store.db_path) from None
        self.writes.clear()

    def count_added_or_updated(self, w: Work) -> None:
        if w.existing is None:
            self.summary.added += 1
        else:
            self.summary.updated += 1

    def skip(self, w: Work, reason: str) -> None:
        """A file that gave no vector now. An indexed photo keeps its row (the vector of its last good bytes) unless
        the path is no longer a file: unreadable for a moment (permissions, a sync client truncating it, I/O) or a
        model that gives NaN never costs a good vector; the next run tries it again."""
        key = path_key(w.path)
        old_row = self.old_vectors.row_at(key) if self.old_vectors and w.existing is None and keeps_row(reason) \
            else None
        if old_row is not None:   # a rebuild: the old database's row, as a plain run would keep it
            self.writes.append(lambda: self.old_vectors.insert(self.store, old_row))
        keep = (w.existing is not None or old_row is not None) and keeps_row(reason)
        self.summary.skipped[key] = reason
        self.summary.new_skips.append((key, reason))
        self.log(f"imgtxt: skipped {printable(key)}: {reason}" + ("; kept its earlier vector" if keep else ""))
        if w.existing is not None and not keep:
            self.summary.removed += 1
        self.writes.append(lambda: self.store.put_skipped(w.path, reason, w.size, w.mtime_ns, keep_photo=keep))

    # ------------------------------------------------------------------ 1. what is on disk now
    def scan(self, excludes) -> tuple[dict[str, Found], list[Problem]]:
        found: dict[str, Found] = {}
        problems: list[Problem] = []
        roots = [r for r in self.roots if os.path.lexists(r)]
        self.scanned_mounts: set[str] = set()
        for entry in scan(roots, excludes, mounts=self.scanned_mounts):
            if self.forgotten and is_under(path_key(entry.path), self.forgotten):
                continue
            if isinstance(entry, Found):
                found[path_key(entry.path)] = entry
            else:
                problems.append(entry)
        return found, problems

    # ------------------------------------------------------------------ 2. compare with the database, opening nothing
    def offline_roots(self, found: dict[str, Found | None], problems: list[Problem], rows: dict) -> list[str]:
        """The folders whose photos are kept because they cannot be reached now (reach.py's rule), with a
        notice for each. `rows` may leave out the rows that matched the disk: an unreachable folder has none."""
        indexed = list(rows)
        if self.old_vectors is not None:   # a rebuild: what the old database holds is what can be kept
            indexed += [k for k in self.old_vectors.keys_under(self.root_keys) if k not in found and k not in rows]
        for root, key in zip(self.roots, self.root_keys):
            if not os.path.lexists(root) and not any(is_under(k, [key]) for k in indexed):
                raise StoreError(f"no such folder: {root}")
        self.indexed_keys = indexed
        self.reach = reach.decide(self.roots, found.keys(), problems, indexed, self.store.meta(),
                                  self.scanned_mounts, self.prune)
        if self.old_vectors is not None:
            with self.store.db.atomic():
                self.old_vectors.carry_rows(self.store, self.reach.keep)
        for key, reason in self.reach.pruned.items():
            held = sum(1 for k in indexed if is_under(k, [key]))
            self.notice(f"imgtxt: {printable(key)} cannot be reached ({reason}): removing its {held} photos (--prune)")
        for key, reason in self.reach.offline.items():
            held = sum(1 for k in indexed if is_under(k, [key]))
            self.summary.kept_offline[printable(key)] = held
            self.notice(f"imgtxt: {printable(key)} cannot be reached ({reason}; an unplugged drive?): kept its "
                        f"{held} photos; pass --prune to remove them")
        return self.reach.keep

    def compare(self, found: dict[str, Found | None], problems: list[Problem]) -> tuple[list[Work], set[str]]:
        # Streamed: a row that matches the disk (nearly every row of a rerun) is counted and dropped, and its
        # scan entry freed (set to None), so a million-photo rerun never holds both sides in memory.
        rows: dict = {}
        for row in self.store.iter_photo_rows():
            entry = found.get(row.path)
            if entry is not None and (entry.size, entry.mtime_ns, self.model_id) == \
                    (row.size, row.mtime_ns, row.model_id) and row.ctime_ns in (None, entry.ctime_ns) \
                    and row.ino in (None, entry.ino):   # inode + ctime: not another file of equal size and mtime
                self.summary.unchanged += 1
                found[row.path] = None
                if row.ino is None:   # written by an earlier version: its stamp from now on
                    self.stamps.append((row.id, entry.ino, entry.ctime_ns))
            else:
                rows[row.path] = row
        skipped = self.store.skipped_rows()
        self.rows, self.old_skips = rows, skipped
        offline = self.offline_roots(found, problems, rows)
        raw_skip = raw_hint() if problems else None
        waiting_for_extra = any(p.reason == raw_skip for p in problems)   # listed as skipped, with the hint
        if not found and not waiting_for_extra and not any(is_under(k, self.root_keys) for k in self.indexed_keys):
            from .scan import photo_suffixes

            raise NoPhotos(f"no photos under {', '.join(self.roots)} "
                           f"(looked for {', '.join(sorted(photo_suffixes()))})")
        others = self.store.other_model_ids(self.model_id)
        if others:
            outside = sum(1 for k, r in rows.items() if r["model_id"] != self.model_id and not is_under(k, self.root_keys))
            self.summary.model_note = (f"the index holds {sum(others.values())} vectors of another model "
                                       f"({', '.join(others)}); re-embedding those under these folders with "
                                       f"{self.model_id}")
            if outside:
                self.summary.model_note += (f"; {outside} photos outside them are not searchable with this model "
                                            f"until their folders are indexed again")
            self.notice(f"imgtxt: {self.summary.model_note}")

        work: list[Work] = []
        for key, entry in found.items():
            if entry is None:
                continue  # unchanged, counted above
            row = rows.get(key)
            old_skip = skipped.get(key)
            if row is None and old_skip and (old_skip["size"], old_skip["mtime_ns"]) == (entry.size, entry.mtime_ns) \
                    and not old_skip["reason"].startswith(RETRIED):
                self.summary.skipped[key] = old_skip["reason"]  # known bad and unchanged: not retried
                continue
            work.append(Work(entry.path, entry.size, entry.mtime_ns, row, stamp=(entry.ino, entry.ctime_ns)))
        # Only rows under this run's roots can vanish; rows elsewhere are never opened, stat'ed nor removed
        # (their drive may be unplugged, and a path the database merely names could be anything, /dev/zero).
        # Neither do the photos of a folder that cannot be reached (reach.py).
        vanished = {k for k in rows if k not in found and is_under(k, self.root_keys) and not is_under(k, offline)}
        return work, vanished

    # ------------------------------------------------------------------ 4. decode in threads, embed in batches
    def embed(self, to_embed: list[Work]) -> None:
        if getattr(self, "ray_address", None):
            from .ray_index import embed_on_ray

            return embed_on_ray(self, to_embed, self.ray_address)
        with one_blas_thread():
            self.embed_here(to_embed)

    def embed_here(self, to_embed: list[Work]) -> None:
        # The CNN gets every core, beside the decoding threads: it runs while they wait on the next batch, and
        # with cheap decodes (previews) it is the bottleneck (docs/indexing.md: 1.09x vs 0.74x decode only with
        # one CNN thread on 2 cores). The CNN loads here, only when something needs embedding.
        embedder = self.model.image_embedder(threads=os.cpu_count() or 1)
        self.summary.device = embedder.device_line
        if self.progress:  # beside the progress bar; --json carries it as "device"
            self.log(f"imgtxt: the CNN runs on {self.summary.device}")
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(to_embed), unit="photo", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
        waiting: list[tuple[Work, tuple]] = []   # decoded, not through the CNN yet: at most CNN_BATCH_MAX
        embedded: list[tuple[Work, int, int, np.ndarray]] = []   # this commit's photos and their vectors

        def embed_waiting():
            # The CNN's activations grow with its batch (--batch-size 1024 peaked at 12.8 GB on 300 photos), and
            # so did the decoded photos held for a commit: both stay at CNN_BATCH_MAX; --batch-size sets the commit.
            if waiting:
                vectors = self.model.embed_images(np.stack([square for _, (square, _, _) in waiting]))
                embedded.extend((w, width, height, vector.astype(np.float32))
                                for (w, (_, width, height)), vector in zip(waiting, vectors))
                waiting.clear()

        def commit_batch():
            embed_waiting()
            for w, width, height, vector in embedded:
                if not usable_vector(vector):
                    self.skip(w, NO_VECTOR)
                    continue
                self.count_added_or_updated(w)
                self.writes.append(lambda w=w, wd=width, ht=height, v=encode_vector(vector): self.store.put_photo(
                    w.path, w.size, w.mtime_ns, w.hash, wd, ht, v, self.model_id, w.stamp))
            self.summary.embedded += len(embedded)
            done = len(self.writes)
            self.commit()  # one transaction per batch: kill -9 loses at most this batch
            if bar is not None:
                bar.update(done)
            embedded.clear()

        size = embedder.resize_size
        try:
            ahead = min(4 * self.batch_size, 4 * CNN_BATCH_MAX)   # decoded squares waiting: bounded too
            for w, result in in_order(lambda w: decode(w, size, self.previews), to_embed, self.workers, ahead):
                if isinstance(result, ImageError):
                    self.skip(w, str(result))
                else:
                    waiting.append((w, result))
                if len(waiting) >= CNN_BATCH_MAX:
                    embed_waiting()
                if len(embedded) + len(waiting) >= self.batch_size:
                    commit_batch()
            commit_batch()
        finally:  # also on Ctrl-C: closed now, the bar is not drawn again below the "interrupted" line at exit
            if bar is not None:
                bar.close()

    # ------------------------------------------------------------------ 5. removals, folder problems, vectors
    def finish(self, found: dict[str, Found], problems: list[Problem], vanished: set[str]) -> None:
        store, summary = self.store, self.summary
        with store.db.atomic():
            store.stamp_photos(self.stamps)
            store.remove_photos(sorted(vanished))
            summary.removed += len(vanished)
            store.remove_skipped([k for k in self.old_skips if k not in found and is_under(k, self.root_keys)])
            for problem in problems:  # unreadable folders, link loops: re-checked on every run
                key = path_key(problem.path)
                summary.skipped[key] = problem.reason
                if self.old_skips.get(key, {}).get("reason") != problem.reason:
                    summary.new_skips.append((key, problem.reason))
                    self.log(f"imgtxt: skipped {printable(key)}: {problem.reason}")
                store.put_skipped(problem.path, problem.reason, keep_photo=keeps_row(problem.reason))
        dim = self.model.vector_dim
        try:
            synced = vector_build.sync(store, self.model_id, dim, self.model.similarity_kind)
        except OSError as e:  # disk full while writing the vector files: the database is complete, the old files stay
            raise write_error(store.index_dir, e) from None
        summary.indexed, summary.vector_index = synced.live, synced.line()
        if synced.seconds >= 1.0:  # a rebuild of many photos: say why it took a while
            self.log(f"imgtxt: {synced.line()}")
        store.set_meta(model_id=self.model_id, model_folder=str(Path(self.model.folder).resolve()),
                       similarity=self.model.similarity_kind, embed_dim=dim, last_run=now_iso(),
                       photos=summary.indexed, **{reach.MOUNTS_META: json.dumps(self.reach.mounts)},
                       **{PREVIEWS: int(self.previews or store.meta().get(PREVIEWS) == "1")})
