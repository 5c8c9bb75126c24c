"""The files of an index folder besides the database's rows: the run lock, and the `--rebuild` swap.

`index.lock` is held (flock) by a running `imgtxt index`; the lock dies with the process, kill -9 included.
A rebuild writes index.db.rebuild next to a damaged index.db and swaps it in only when complete: the old
file is kept (index.db.damaged, or index.db.damaged.1, .2, ... when that name is taken), never deleted nor
overwritten. A run that finds a complete rebuild not swapped in yet (killed inside its swap) swaps it in; a plain
run removes what a killed rebuild left unfinished.
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
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


COMPLETE = "rebuild_complete"   # meta key of a rebuild database whose run finished: it may replace index.db


def fsync_folder(folder: Path) -> None:
    """Make the renames in `folder` durable (a power cut after a rename must not undo it)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the renames are still atomic
    finally:
        os.close(fd)


BACKUP_NAME = DB_NAME + ".damaged"
BACKUP_TMP = BACKUP_NAME + ".tmp"


def backups(index_dir: Path) -> list[Path]:
    """The old databases kept by earlier rebuilds: index.db.damaged, index.db.damaged.1, ..."""
    return sorted(p for p in Path(index_dir).glob(BACKUP_NAME + "*")
                  if p.name == BACKUP_NAME or p.name[len(BACKUP_NAME) + 1:].isdigit())


def free_backup_name(index_dir: Path) -> Path:
    """The first of index.db.damaged, index.db.damaged.1, ... that no file has: a backup is never overwritten."""
    path, n = index_dir / BACKUP_NAME, 0
    while os.path.lexists(path) or any(os.path.lexists(f"{path}{s}") for s in ("-wal", "-shm")):
        n += 1
        path = index_dir / f"{BACKUP_NAME}.{n}"
    return path


def _already_kept(old: Path) -> bool:
    """The old file is a backup already (a swap killed after its link): it needs no second one."""
    for backup in backups(old.parent):
        try:
            if os.path.samefile(backup, old):
                return True
        except OSError:
            pass
    return False


def swap_in_rebuild(index_dir: Path) -> None:
    """The complete new database replaces index.db; the old one and its WAL move aside, never deleted.

    At every step index.db is present (a kill -9 anywhere leaves a usable index): the old file gets its second
    name (a hard link, else a copy) before the new file replaces it in one rename."""
    old, new = index_dir / DB_NAME, index_dir / REBUILD_NAME
    aside = free_backup_name(index_dir)
    if old.exists() and not _already_kept(old):
        tmp = index_dir / BACKUP_TMP
        tmp.unlink(missing_ok=True)
        try:
            os.link(old, tmp)
        except OSError:
            shutil.copy2(old, tmp)
        os.replace(tmp, aside)
    for suffix in ("-wal", "-shm"):  # the old WAL must not be replayed into the new file
        if (index_dir / (DB_NAME + suffix)).exists():
            os.replace(index_dir / (DB_NAME + suffix), f"{aside}{suffix}")
    os.replace(new, old)
    for suffix in ("-wal", "-shm"):
        (index_dir / (REBUILD_NAME + suffix)).unlink(missing_ok=True)  # empty after the checkpoint and close
    fsync_folder(index_dir)


def finish_interrupted_swap(index_dir: Path) -> bool:
    """A rebuild killed inside its swap: the complete index.db.rebuild is swapped in now instead of being left
    orphaned (also where an earlier imgtxt renamed index.db away first and index.db is missing). True if it was."""
    old, new = index_dir / DB_NAME, index_dir / REBUILD_NAME
    if not new.is_file():
        return False
    if old.exists():
        if not _marked_complete(new):
            return False
        swap_in_rebuild(index_dir)
        return True
    if not (index_dir / (DB_NAME + ".damaged")).exists() and not _marked_complete(new):
        return False
    os.replace(new, old)
    fsync_folder(index_dir)
    return True


def _marked_complete(db_path: Path) -> bool:
    import sqlite3

    try:
        conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", [COMPLETE]).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == "1"


def clear_leftovers(index_dir: Path, notice) -> None:
    """What a killed rebuild left that a plain run has no use for: the unfinished index.db.rebuild (and its WAL),
    the temporary name of a backup. Called once the plain run has opened index.db: a rebuild of a damaged
    index is kept, to be continued by the next `--rebuild`."""
    (index_dir / BACKUP_TMP).unlink(missing_ok=True)
    if not os.path.lexists(index_dir / REBUILD_NAME):
        return
    for suffix in ("", "-wal", "-shm"):
        (index_dir / (REBUILD_NAME + suffix)).unlink(missing_ok=True)
    notice(f"imgtxt: removed the unfinished rebuild {REBUILD_NAME} (a `--rebuild` was stopped; index.db is "
           f"sound); run `imgtxt index --rebuild FOLDER...` to start it again")
