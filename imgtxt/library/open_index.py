"""An index kept open across a Library's queries, and checked for changes on disk before each use.

A query that opened the database, read meta, checked and mapped the vector files and closed it all again paid
for that on every call: at 100k photos, most of a warm query (bench/warm_search.py). A Library keeps one open
index per thread (an sqlite3 connection belongs to the thread that made it, and the web app answers from a thread
pool); before each use `OpenIndex.current()` costs a stat and a pragma:
  - index.db's stamp (inode, size, mtime, ctime; no call can set a ctime back): a rebuild swaps in another file,
    and a file written by anything else is opened afresh, with the checks of a first open;
  - SQLite's data_version, which changes when another connection commits (an index run, a forget, in this
    process or another): meta is read again;
  - the vector files are re-opened only when their record in meta changed, or their stamps on disk did (a write
    onto them), and then through the same record check as a first open.
The notices of an open (a damaged vector file) are repeated with every query, as a fresh open would.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from pathlib import Path

from . import vector_index
from .query import Index
from .store import DB_NAME, StoreError, classify, read_meta


def _db_stamp(index_dir: Path) -> str:
    st = os.stat(Path(index_dir) / DB_NAME)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _vector_stamps(paths: tuple[list[Path], Path | None]) -> tuple[str, str] | None:
    try:
        return vector_index.stamps_of(*paths)
    except OSError:   # no files (an index answered from SQLite): nothing to compare but the record
        return None


class OpenIndex(Index):
    """An Index that stays open: `current()` before each use, `close()` when done."""

    def __init__(self, index_dir: Path):
        stamp = _db_stamp(index_dir) if (Path(index_dir) / DB_NAME).is_file() else ""  # before the open: a file
        super().__init__(index_dir)                    # swapped in meanwhile then differs at the next check
        self._stamp, self._version = stamp, self._data_version()
        self._vectors = None   # (key, stamps, vectors, notices) of the last open_vectors
        self._stamp_paths = None   # (key, Record.stamp_paths) of the record in meta

    def _data_version(self) -> int:
        return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def current(self) -> bool:
        """True when this is still the index on disk (meta re-read if another connection committed since), ready
        for a query (notices cleared); False when it must be opened again."""
        try:
            if _db_stamp(self.dir) != self._stamp:
                return False
            version = self._data_version()   # read before meta: a commit in between is seen at the next check
            if version != self._version:
                self.meta, self._version = read_meta(self.conn), version
        except (OSError, sqlite3.Error):
            return False
        self.notices = []
        return True

    def _open_vectors(self, model):
        key = (model.model_id, model.vector_dim, tuple(sorted(v for v in self.meta.items() if v[0].startswith("vec_"))))
        if self._stamp_paths is None or self._stamp_paths[0] != key:   # the record's files, named once per record
            self._stamp_paths = (key, vector_index.Record.from_meta(self.meta).stamp_paths(self.dir))
        stamps = _vector_stamps(self._stamp_paths[1])
        if self._vectors is None or self._vectors[:2] != (key, stamps):
            notices: list[str] = []
            self._vectors = (key, stamps, vector_index.open_vectors(self.dir, self.meta, self.conn, model.model_id,
                                                                    model.vector_dim, notices), notices)
        self.notices.extend(self._vectors[3])
        return self._vectors[2]

    def close(self) -> None:
        self._vectors = None
        self.conn.close()


class KeptIndexes:
    """The open index of each thread that queried an index folder."""

    def __init__(self, index_dir: Path):
        self.index_dir, self._local = index_dir, threading.local()

    def get(self) -> OpenIndex:
        """This thread's open index, checked (or opened now); raises StoreError when there is none."""
        index = getattr(self._local, "index", None)
        if index is not None and index.current():
            return index
        self.drop()
        self._local.index = OpenIndex(self.index_dir)
        return self._local.index

    def drop(self) -> None:
        """Close this thread's open index (the next query opens it again)."""
        index, self._local.index = getattr(self._local, "index", None), None
        if index is not None:
            try:
                index.close()
            except sqlite3.Error:
                pass


def database_errors(method):
    """An SQLite error anywhere below becomes one StoreError line that names the recovery (busy, cannot write,
    or damaged: `imgtxt index --rebuild`), and the thread's open index is dropped: the next call opens it anew."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            self._kept.drop()
            raise classify(e, self.index_dir / DB_NAME) from None
    return wrapper


# ------------------------------------------------------------------------------------- one BLAS thread

_BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_blas = {"controller": None, "limiter": None, "queries": 0}
_blas_lock = threading.Lock()


@contextlib.contextmanager
def one_blas_thread():
    """numpy's BLAS on one thread while a query runs: a query is a few dozen small matmuls, and a second BLAS thread
    only spins against the rest of the machine (a warm query's p90 was 30x its p50 at load 2 with two OpenBLAS
    threads, bench/warm_search.py). Left alone when the environment sets the threads (the CLI sets one before numpy
    loads; a user's own choice wins). The limit is process-wide, so it is counted: set by the first of concurrent
    queries (the web app's threads), given back by the last. The controller is made once a process (~10 ms)."""
    if any(v in os.environ for v in _BLAS_VARIABLES):
        yield
        return
    with _blas_lock:
        if _blas["queries"] == 0:
            if _blas["controller"] is None:
                from threadpoolctl import ThreadpoolController

                _blas["controller"] = ThreadpoolController()
            _blas["limiter"] = _blas["controller"].limit(limits=1, user_api="blas")
        _blas["queries"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas["queries"] -= 1
            if _blas["queries"] == 0:
                _blas["limiter"].restore_original_limits()


__all__ = ["OpenIndex", "KeptIndexes", "database_errors", "one_blas_thread", "StoreError"]
