"""What `imgtxt index --rebuild FOLDER...` keeps from the old database, so a rebuild of some folders loses nothing.

A rebuild re-checks the folders it is given, from their files. Everything else the old index.db holds as far as
it can still be read (it may be damaged: that is why one rebuilds) is carried into the new database as it was:
the photos, skipped files and forgotten folders outside those folders, and the list of indexed folders. Inside
them, a photo whose bytes (sha256) the old database holds a usable vector for gets that vector instead of the
CNN's. What cannot be read is said in one notice; the old file itself is kept beside the new one
(index_folder.swap_in_rebuild), never overwritten.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np

from .index_meta import meta_folders, read_meta
from .photo_paths import is_under, path_key
from .store import DB_NAME, Store, write_folders

PREVIEWS = "previews"          # meta key: "1" once any run embedded photos' previews (--previews) into the index
CARRIED = "rebuild_carried"   # meta key of a rebuild database that holds the old one's other folders already
# A row's columns as carried; the file's stamp (inode, ctime) too, so a carried photo is never trusted by size and
# mtime alone (an index from before stamps gives NULL: trusted once, then stamped).
COLUMNS = "id, path, path_bytes, size, mtime_ns, hash, width, height, embedding, model_id, indexed_at, ino, ctime_ns"
MARKS = ", ".join("?" * 13)


def _select(conn: sqlite3.Connection) -> str:
    """COLUMNS as the old database can give them (no stamps before schema v5)."""
    names = {row[1] for row in conn.execute("PRAGMA table_info(photos)")}
    return COLUMNS if "ino" in names else COLUMNS.replace("ino, ctime_ns", "NULL, NULL")


def open_old(index_dir: Path) -> sqlite3.Connection | None:
    """The old index.db read-only, or None when there is none or it is not a readable database at all."""
    db_path = Path(index_dir) / DB_NAME
    if not db_path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        conn.close()
        return None
    return conn


def _key(path, raw) -> str | None:
    if isinstance(raw, bytes) and raw:
        return path_key(os.fsdecode(raw))
    return path if isinstance(path, str) else None


def _rows(conn: sqlite3.Connection, sql: str, problems: list[str]):
    """The rows of a query on the old database, up to the first damaged page (its error goes to `problems`)."""
    try:
        cursor = conn.execute(sql)
        while (row := cursor.fetchone()) is not None:
            yield row
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):   # an index from before `forget`: nothing forgotten
            problems.append(str(e).splitlines()[0] if str(e) else "a damaged page")
    except sqlite3.Error as e:
        problems.append(str(e).splitlines()[0] if str(e) else "a damaged page")


def carry_over(store: Store, old: sqlite3.Connection | None, root_keys: list[str], notice) -> None:
    """Copy the old database's rows outside `root_keys` into the new one, once per rebuild database (a killed
    rebuild continues with them), as far as the old file can be read: a damaged page ends the copy of its
    table, what was read before it is kept. Rows keep their ids: the new database is empty when this runs."""
    if store.meta().get(CARRIED) == "1":
        if old is not None:
            keep_forgotten(store, old)
        return
    kept, skipped, problems = 0, 0, []
    folders: list[str] = []
    meta: dict = {}
    if old is None:
        problems.append("it is not a readable database")
    else:
        try:
            meta = read_meta(old)
        except sqlite3.Error as e:
            problems.append(str(e).splitlines()[0] if str(e) else "a damaged page")
        folders = [f for f in meta_folders(meta) if not is_under(f, root_keys)]
        with store.db.atomic():
            for row in _rows(old, f"SELECT {_select(old)} FROM photos ORDER BY id", problems):
                key = _key(row[1], row[2])
                if key is None or is_under(key, root_keys) or not isinstance(row[8], bytes):
                    continue
                store.db.execute(f"INSERT OR IGNORE INTO photos ({COLUMNS}, generation) VALUES ({MARKS}, 1)",
                                 [row[0], key, *row[2:]])
                kept += 1
            for path, raw, size, mtime_ns, reason, seen in _rows(
                    old, "SELECT path, path_bytes, size, mtime_ns, reason, seen_at FROM skipped", problems):
                key = _key(path, raw)
                if key is not None and not is_under(key, root_keys):
                    store.db.execute("INSERT OR IGNORE INTO skipped VALUES (?, ?, ?, ?, ?, ?)",
                                     [key, raw, size, mtime_ns, reason, seen])
                    skipped += 1
            for path, raw, at in _rows(old, "SELECT path, path_bytes, forgotten_at FROM forgotten", problems):
                store.db.execute("INSERT OR IGNORE INTO forgotten VALUES (?, ?, ?)", [path, raw, at])
            if kept:
                store.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('vectors_dirty', '1')")
    write_folders(store, add=folders)
    store.set_meta(**{CARRIED: 1, PREVIEWS: int(kept > 0 and meta.get(PREVIEWS) == "1")})
    if problems:
        notice(f"imgtxt: the old index could be read only in part ({problems[0]}): kept the {kept} photos of "
               f"other folders it gave; the old file is kept beside the new one")
    elif kept or skipped or folders:
        notice(f"imgtxt: --rebuild re-checks only {', '.join(root_keys)}: kept the {kept} photos of other folders "
               f"({', '.join(folders) or 'not in the folder list'}) as the old index had them")


def keep_forgotten(store: Store, old: sqlite3.Connection) -> None:
    """A rebuild continued after `imgtxt forget` changed the old database: what it forgot stays forgotten (and
    out of the new database), whatever the killed run had copied or indexed before."""
    with store.db.atomic():
        for path, raw, at in _rows(old, "SELECT path, path_bytes, forgotten_at FROM forgotten", []):
            store.db.execute("INSERT OR IGNORE INTO forgotten VALUES (?, ?, ?)", [path, raw, at])
            prefix = path.rstrip(os.sep) + os.sep
            store.db.execute("DELETE FROM photos WHERE path = ? OR substr(path, 1, ?) = ?", [path, len(prefix), prefix])


class OldVectors:
    """The old database's rows for the folders a rebuild re-checks: vectors by content hash, and the rows of what
    cannot be looked at now (kept, as a plain run keeps them). Any read error (a damaged page) turns the lookups
    off: the photo is embedded instead, or, unreadable, left out."""

    def __init__(self, conn: sqlite3.Connection | None, model_id: str, dim: int, previews: bool = False):
        self.source, self.conn, self.model_id, self.dim = conn, conn, model_id, dim
        self.reused = self.kept = 0
        try:   # vectors of embedded previews are not the main picture's: a rebuild that changes that embeds anew
            if conn is not None and (read_meta(conn).get(PREVIEWS) == "1") != previews:
                self.conn = None
        except sqlite3.Error:
            self.conn = self.source = None

    def keys_under(self, folders: list[str]) -> list[str]:
        """The old database's photo keys under `folders` (what a plain run would compare with the disk)."""
        if self.source is None:
            return []
        try:
            keys = (_key(p, raw) for p, raw in self.source.execute("SELECT path, path_bytes FROM photos"))
            return [k for k in keys if k is not None and is_under(k, folders)]
        except sqlite3.Error:
            self.source = None
            return []

    def row_at(self, key: str) -> tuple | None:
        """The old row of one photo (COLUMNS, without its id), or None."""
        if self.source is None:
            return None
        try:
            row = self.source.execute(f"SELECT {_select(self.source)} FROM photos WHERE path = ?", [key]).fetchone()
        except sqlite3.Error:
            self.source = None
            return None
        return (key, *row[2:]) if row is not None and isinstance(row[8], bytes) else None

    def carry_rows(self, store: Store, folders: list[str]) -> None:
        """Copy the old rows under `folders` (offline roots, unreadable folders and photos) that the new database
        lacks: a rebuild never drops what it cannot look at now."""
        if self.source is None or not folders:
            return
        try:
            for row in self.source.execute(f"SELECT {_select(self.source)} FROM photos"):
                key = _key(row[1], row[2])
                if key is not None and is_under(key, folders) and isinstance(row[8], bytes):
                    self.insert(store, (key, *row[2:]))
        except sqlite3.Error:
            self.source = None

    def insert(self, store: Store, row: tuple) -> None:
        """One old row into the new database under a new id (ids the rebuild gave out are not reused)."""
        cursor = store.db.execute(f"INSERT OR IGNORE INTO photos ({COLUMNS.removeprefix('id, ')}, generation) "
                                  f"VALUES ({MARKS[3:]}, 1)", list(row))
        self.kept += max(cursor.rowcount, 0)
        store.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('vectors_dirty', '1')")

    def vector(self, content_hash: str) -> dict | None:
        if self.conn is None:
            return None
        try:
            row = self.conn.execute("SELECT embedding, width, height FROM photos WHERE hash = ? AND model_id = ? "
                                    "LIMIT 1", [content_hash, self.model_id]).fetchone()
        except sqlite3.Error:
            self.conn = None
            return None
        if row is None or not isinstance(row[0], bytes) or len(row[0]) not in (2 * self.dim, 4 * self.dim):
            return None
        if not np.isfinite(np.frombuffer(row[0], np.float16 if len(row[0]) == 2 * self.dim else np.float32)).all():
            return None
        return {"embedding": row[0], "width": row[1], "height": row[2]}

    def close(self) -> None:
        for conn in {id(c): c for c in (self.conn, self.source) if c is not None}.values():
            conn.close()
