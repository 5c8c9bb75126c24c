"""The files of an index folder besides the database's rows: the run lock, and the `--rebuild` swap.

`index.lock` is held (flock) by a running `imgtxt index`; the lock dies with the process, kill -9 included.
A rebuild writes index.db.rebuild next to a damaged index.db and swaps it in only when complete: the old
file is kept (index.db.damaged), never deleted.
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from .store import DB_NAME, Store, StoreError, write_error

REBUILD_NAME = DB_NAME + ".rebuild"


class IndexLock:
    """One index run at a time per index folder; the lock dies with the process (kill -9 included)."""

    def __init__(self, index_dir: Path):
        self.path = Path(index_dir) / "index.lock"

    def __enter__(self):
        # O_NOFOLLOW and no O_TRUNC: a symbolic link planted as index.lock can neither be followed nor truncate
        # whatever it points at.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise StoreError(f"{self.path} is a symbolic link; refusing to use it (remove it)") from None
            raise write_error(self.path.parent, e) from None
        self.file = os.fdopen(fd, "r+b")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise StoreError(f"another `imgtxt index` is running on {self.path.parent}; wait for it to finish") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def open_rebuild_store(index_dir: Path) -> Store:
    try:
        return Store(index_dir, REBUILD_NAME)  # a partial rebuild from a killed run is continued
    except StoreError:
        for suffix in ("", "-wal", "-shm"):
            (index_dir / (REBUILD_NAME + suffix)).unlink(missing_ok=True)
        return Store(index_dir, REBUILD_NAME)


def swap_in_rebuild(index_dir: Path) -> None:
    """The complete new database replaces index.db; the old one and its WAL move aside, never deleted."""
    old, new = index_dir / DB_NAME, index_dir / REBUILD_NAME
    for suffix in ("-wal", "-shm"):  # the old WAL must not be replayed into the new file
        if (index_dir / (DB_NAME + suffix)).exists():
            os.replace(index_dir / (DB_NAME + suffix), index_dir / (DB_NAME + ".damaged" + suffix))
    if old.exists():
        os.replace(old, index_dir / (DB_NAME + ".damaged"))
    os.replace(new, old)
    for suffix in ("-wal", "-shm"):
        (index_dir / (REBUILD_NAME + suffix)).unlink(missing_ok=True)  # empty after the checkpoint and close
