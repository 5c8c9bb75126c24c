"""The photo index on disk: an SQLite database (the source of truth) in an index folder.

  <index dir>/index.db           photos (one row per photo, with its embedding), skipped files, meta
  <index dir>/vectors-<model>-*     the search files kept in step with it (see vector_index.py)
  <index dir>/index.lock         held by a running `imgtxt index`

The index folder is, in order: `--index DIR`, $IMGTXT_INDEX_DIR, $XDG_DATA_HOME/imgtxt, ~/.local/share/imgtxt.

Writers go through sqlite-utils (`Store`); the query path opens the file read-only with the standard
library's sqlite3 (`open_readonly`), because importing sqlite-utils alone costs 0.4 s of a search.
WAL mode lets searches read the last committed state while an index run writes; every run ends with a
checkpoint, so the .db file alone is complete and a read-only copy (a published index, a read-only
medium) is searched with SQLite's `immutable=1`.
Photo paths are private: a new index folder is created 0700 and its database 0600.
"""
from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

from imgtxt import paths
from imgtxt.errors import ImgtxtError

from .index_meta import (COUNTER_MAX, meta_folders, meta_int, read_meta,  # noqa: F401  (importable from here)
                         write_folders)
from .migrations import SCHEMA_VERSION, migrate, schema_version
from .photo_rows import KnownHashes, PhotoRow
from .photo_paths import path_bytes, path_key

INDEX_ENV = "IMGTXT_INDEX_DIR"
DB_NAME = "index.db"
QUICK_CHECK_MAX_BYTES = 32 << 20   # a read-only open verifies the file's structure up to this size (~0.1 s)
# A photos row of the 1024-d default is ~2.2 KB (float16 vector + path + hash): two do not fit a 4 KB page, so
# SQLite's default left each page half empty (1M photos: 4.35 GB; 2.59 GB in 16 KB pages, which hold seven).
# Set when the file is created; an existing database keeps its page size.
PAGE_SIZE = 16384


class StoreError(ImgtxtError):
    """An index that cannot be used: missing, empty, locked, damaged, or written by a newer imgtxt."""


def damaged(db_path: Path, error: Exception | str) -> StoreError:
    """The one-line answer to a damaged database, naming the recovery (which never deletes the old file)."""
    return StoreError(f"{db_path} is damaged ({str(error).splitlines()[0] if str(error) else 'malformed'}); "
                      f"rebuild it from your photos with `imgtxt index --rebuild FOLDER...` "
                      f"(the damaged file is kept as {DB_NAME}.damaged)")


def write_error(path: Path, error: Exception) -> StoreError:
    """Disk full, read-only folder, I/O error while writing the index: one line, nothing committed is lost."""
    text = str(error).splitlines()[0] if str(error) else error.__class__.__name__
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
        if error.filename:   # the file it is about: "Is a directory" alone names nothing
            text += f" ({os.fsdecode(error.filename)})"
    return StoreError(f"cannot write the index at {path}: {text}; the photos committed so far are kept, "
                      f"free space (or make the folder writable) and run `imgtxt index` again")


def classify(error: sqlite3.DatabaseError, db_path: Path) -> StoreError:
    """An SQLite error as a one-line StoreError: busy, cannot write (disk full, read-only), or damaged."""
    text = str(error)
    if "locked" in text or "busy" in text:
        return StoreError(f"{db_path} is busy (another program holds it); try again")
    if any(k in text for k in ("readonly", "read-only", "unable to open", "full", "disk I/O", "out of memory")):
        return write_error(db_path.parent, error)
    return damaged(db_path, error)


def make_private_dir(folder: Path) -> None:
    """Create the index folder 0700 (photo paths are private); an existing folder keeps its mode."""
    folder = Path(folder)
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass


def default_index_dir() -> Path:
    return paths.index_dir()


def resolve_index_dir(option: Path | str | None) -> Path:
    return paths.index_dir(option)


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def now_precise() -> str:
    """indexed_at: to the microsecond; for information (vector_build.sync goes by the write generation)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# ------------------------------------------------------------------------------- vectors

# Vectors are stored as float16: half the database of float32 (a 1 KB blob per photo in a 512-d space) with
# the same val recall for the shipped model (rsum 266.54 both; 99.99% of top-10s unchanged, bench/vector_storage.py).
# Rows written as float32 by earlier versions are still read: the blob's length says which.
VECTOR_DTYPE = np.float16


def encode_vector(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()


# A vector with NaN or inf (damaged weights, a value past float16's range) never enters an index: the photo
# is skipped with this reason.
NO_VECTOR = "the model gave no usable vector for it (NaN or inf; are its weights damaged?)"


def usable_vector(vector) -> bool:
    """Finite as stored (float16, or the float16 bytes a Ray worker sends)."""
    stored = np.frombuffer(vector, VECTOR_DTYPE) if isinstance(vector, bytes) else np.asarray(vector, VECTOR_DTYPE)
    return bool(np.isfinite(stored).all())


def decode_vectors(blobs: list[bytes], dim: int) -> np.ndarray:
    """Stored blobs -> (M, D) float32."""
    if all(len(b) == 2 * dim for b in blobs):
        return np.frombuffer(b"".join(blobs), np.float16).reshape(len(blobs), dim).astype(np.float32)
    out = np.empty((len(blobs), dim), np.float32)
    for i, blob in enumerate(blobs):
        if len(blob) not in (2 * dim, 4 * dim):
            raise StoreError(f"a stored vector has {len(blob)} bytes, not a {dim}-d vector: the index is damaged")
        out[i] = np.frombuffer(blob, np.float16 if len(blob) == 2 * dim else np.float32)
    return out


def vector_chunks(conn: sqlite3.Connection, model_id: str, dim: int, since: tuple[int, int, str] | None = None,
                  chunk: int = 8192):
    """(ids int64, vectors float32 (M, D)) of the photos embedded by `model_id`, streamed in id order.
    `since` (max id, generation, time): only rows added after that id or (re-)embedded in a later write
    generation (or, written by a version without generations, at or after that time)."""
    sql = "SELECT id, embedding FROM photos WHERE model_id = ?"
    params: list = [model_id]
    if since is not None:
        sql += " AND (id > ? OR generation > ? OR indexed_at >= ?)"
        params += list(since)
    cursor = conn.execute(sql + " ORDER BY id", params)
    while rows := cursor.fetchmany(chunk):
        yield np.array([r[0] for r in rows], np.int64), decode_vectors([r[1] for r in rows], dim)


def _check_not_newer(version: int, db_path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(f"the index at {db_path.parent} was written by a newer imgtxt (schema v{version}, "
                         f"this one reads up to v{SCHEMA_VERSION}); upgrade imgtxt or use another --index")


def quick_check(conn: sqlite3.Connection, db_path: Path) -> None:
    try:
        result = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise damaged(db_path, e) from None
    if result != "ok":
        raise damaged(db_path, result)


def _connect_readonly(db_path: Path) -> sqlite3.Connection:
    """mode=ro needs to create the -shm file next to a WAL database; in a folder it cannot write to (a
    published index, a read-only medium) the file is opened immutable, which the end-of-run checkpoint
    makes complete."""
    uri = db_path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True)
    try:
        schema_version(conn)
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if os.access(db_path.parent, os.W_OK) and not _read_only_fs(db_path.parent):
            raise
    return sqlite3.connect(f"{uri}?immutable=1", uri=True)


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def open_readonly(index_dir: Path, check: bool = True) -> sqlite3.Connection:
    """A read-only connection for queries; never creates or migrates anything. `check`: verify the file's
    structure (PRAGMA quick_check) when it is small enough for that to be cheap."""
    db_path = Path(index_dir) / DB_NAME
    if not db_path.is_file():
        if (db_path.parent / f"{DB_NAME}.rebuild").is_file() and (db_path.parent / f"{DB_NAME}.damaged").exists():
            raise StoreError(f"the rebuild of the index at {index_dir} was interrupted: run `imgtxt index FOLDER` "
                             f"to finish it")
        raise StoreError(f"no index at {index_dir}: run `imgtxt index FOLDER` first (or pass --index DIR)")
    try:
        conn = _connect_readonly(db_path)
        version = schema_version(conn)
    except sqlite3.DatabaseError as e:
        if "file is not a database" in str(e) or "malformed" in str(e):
            raise damaged(db_path, f"not a readable imgtxt index: {e}") from None
        raise StoreError(f"{db_path}: not a readable imgtxt index ({e})") from None
    _check_not_newer(version, db_path)
    if check and db_path.stat().st_size <= QUICK_CHECK_MAX_BYTES:
        quick_check(conn, db_path)
    if version < SCHEMA_VERSION:
        raise StoreError(f"the index at {index_dir} is from an older imgtxt: run `imgtxt index` once to upgrade it")
    return conn


class Store:
    """Read-write access for `imgtxt index`: creates the folder and database, applies migrations.

    `db_name`: another file in the folder (`imgtxt index --rebuild` builds index.db.rebuild beside the
    damaged index.db and swaps it in only when complete)."""

    def __init__(self, index_dir: Path | str, db_name: str = DB_NAME):
        import sqlite_utils

        self.index_dir = Path(index_dir)
        self._damaged_generation: tuple | None = None   # (a damaged vec_generation, the generation it counts as)
        make_private_dir(self.index_dir)
        self.db_path = self.index_dir / db_name
        try:
            if not self.db_path.exists():
                os.close(os.open(self.db_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            pass
        except OSError as e:
            raise write_error(self.index_dir, e) from None
        try:
            self.db = sqlite_utils.Database(self.db_path)
            if self.db_path.stat().st_size == 0:
                self.db.execute(f"PRAGMA page_size={PAGE_SIZE}")   # only before the first write counts
            version = schema_version(self.db.conn)
            _check_not_newer(version, self.db_path)
            if self.db_path.stat().st_size <= 8 * QUICK_CHECK_MAX_BYTES:  # an index run can afford ~1 s
                quick_check(self.db.conn, self.db_path)
            self.db.enable_wal()
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            self.db.execute("PRAGMA busy_timeout=10000")
            migrate(self.db, version)
        except sqlite3.DatabaseError as e:
            raise classify(e, self.db_path) from None

    # -------------------------------------------------------------- meta
    def meta(self) -> dict[str, str]:
        return read_meta(self.db.conn)

    def set_meta(self, **values: str) -> None:
        self.db["meta"].upsert_all([{"key": k, "value": str(v)} for k, v in values.items()], pk="key")

    # -------------------------------------------------------------- photos
    def iter_photo_rows(self) -> Iterator[PhotoRow]:
        """Every photos row (without the embedding), streamed: a comparison holds only the rows it keeps."""
        models: dict[str, str] = {}  # one string per model id, not one per row
        cursor = self.db.conn.execute("SELECT id, path, path_bytes, size, mtime_ns, hash, model_id, ino, ctime_ns "
                                      "FROM photos")
        while chunk := cursor.fetchmany(10_000):
            for i, path, raw, size, mtime_ns, content_hash, model_id, ino, ctime_ns in chunk:
                yield PhotoRow(i, path, raw, size, mtime_ns, content_hash, models.setdefault(model_id, model_id),
                               ino, ctime_ns)

    def photo_rows(self) -> dict[str, PhotoRow]:
        """path -> row (without the embedding)."""
        return {row.path: row for row in self.iter_photo_rows()}

    def hashes_with_vectors(self, model_id: str) -> KnownHashes:
        """`hash in store.hashes_with_vectors(model)`: asked of the hash index per file, so a run with little
        to do never loads a million hashes (~110 MB)."""
        return KnownHashes(self.db.conn, model_id)

    def vector_for_hash(self, content_hash: str, model_id: str) -> dict | None:
        """One stored (embedding, width, height) of this content, or None: an index lookup, however many
        copies of the photo the index holds."""
        sql = "SELECT embedding, width, height FROM photos WHERE hash = ? AND model_id = ? LIMIT 1"
        return next(iter(self.db.query(sql, [content_hash, model_id])), None)

    def put_photo(self, path: str, size: int, mtime_ns: int, content_hash: str, width, height,
                  embedding: bytes | np.ndarray, model_id: str, stamp: tuple[int, int] | None = None) -> None:
        key = path_key(path)
        if isinstance(embedding, np.ndarray):
            embedding = encode_vector(embedding)
        ino, ctime_ns = stamp or (None, None)
        row = {"path": key, "path_bytes": path_bytes(path), "size": size, "mtime_ns": mtime_ns,
               "hash": content_hash, "width": width, "height": height, "embedding": embedding,
               "model_id": model_id, "indexed_at": now_precise(), "generation": self.write_generation(),
               "ino": ino, "ctime_ns": ctime_ns}
        # Update in place when the path is known, so the photo keeps its id.
        cur = self.db.execute(
            "UPDATE photos SET path_bytes=:path_bytes, size=:size, mtime_ns=:mtime_ns, hash=:hash, width=:width, "
            "height=:height, embedding=:embedding, model_id=:model_id, indexed_at=:indexed_at, "
            "generation=:generation, ino=:ino, ctime_ns=:ctime_ns WHERE path=:path", row)
        if cur.rowcount == 0:
            self.db["photos"].insert(row)
        self.db.execute("DELETE FROM skipped WHERE path = ?", [key])
        # In the same transaction as the vector: the vector files are behind until vector_build.sync clears it.
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('vectors_dirty', '1')")

    def write_generation(self) -> int:
        """One past the generation the search files were last synced at (a counter, never the clock). A missing
        or damaged value (not an integer, negative, past SQLite's range) counts as the highest generation a row
        holds: the search files' record is then damaged too (vector_index.Record), so the next sync rebuilds."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'vec_generation'").fetchone()
        if row is None:
            return 1
        raw = row[0]
        synced = meta_int({"vec_generation": raw if isinstance(raw, str) else str(raw)}, "vec_generation", low=0)
        if synced is None:
            if self._damaged_generation is None or self._damaged_generation[0] != raw:   # one scan, not one per photo
                top = self.db.execute("SELECT max(generation) FROM photos").fetchone()[0]
                self._damaged_generation = (raw, top if isinstance(top, int) and 0 <= top <= COUNTER_MAX else 0)
            synced = self._damaged_generation[1]
        return synced + 1

    def move_photo(self, photo_id: int, new_path: str, size: int, mtime_ns: int,
                   stamp: tuple[int, int] | None = None) -> None:
        key = path_key(new_path)
        ino, ctime_ns = stamp or (None, None)
        self.db.execute("DELETE FROM photos WHERE path = ? AND id != ?", [key, photo_id])  # a file moved over it
        self.db.execute("UPDATE photos SET path=?, path_bytes=?, size=?, mtime_ns=?, ino=?, ctime_ns=? WHERE id=?",
                        [key, path_bytes(new_path), size, mtime_ns, ino, ctime_ns, photo_id])
        self.db.execute("DELETE FROM skipped WHERE path = ?", [key])

    def stamp_photos(self, stamps: list[tuple[int, int, int]]) -> None:
        """(id, inode, ctime_ns) of rows written by an earlier version, which had no stamp."""
        self.db.conn.executemany("UPDATE photos SET ino = ?, ctime_ns = ? WHERE id = ?",
                                 [(ino, ctime, i) for i, ino, ctime in stamps])

    def remove_photos(self, keys: list[str]) -> None:
        for key in keys:
            self.db.execute("DELETE FROM photos WHERE path = ?", [key])

    def count_photos(self, model_id: str | None = None) -> int:
        if model_id is None:
            return self.db.execute("SELECT count(*) FROM photos").fetchone()[0]
        return self.db.execute("SELECT count(*) FROM photos WHERE model_id = ?", [model_id]).fetchone()[0]

    def other_model_ids(self, model_id: str) -> dict[str, int]:
        sql = "SELECT model_id, count(*) AS n FROM photos WHERE model_id != ? GROUP BY model_id"
        return {r["model_id"]: r["n"] for r in self.db.query(sql, [model_id])}

    # -------------------------------------------------------------- skipped files
    def skipped_rows(self) -> dict[str, dict]:
        return {r["path"]: r for r in self.db.query("SELECT path, size, mtime_ns, reason FROM skipped")}

    def put_skipped(self, path: str, reason: str, size: int | None = None, mtime_ns: int | None = None,
                    keep_photo: bool = False) -> None:
        """Record a file that gave no vector; its photos row goes too unless `keep_photo` (unreadable for now)."""
        key = path_key(path)
        self.db["skipped"].upsert({"path": key, "path_bytes": path_bytes(path), "size": size, "mtime_ns": mtime_ns,
                                   "reason": reason, "seen_at": now_iso()}, pk="path")
        if not keep_photo:
            self.db.execute("DELETE FROM photos WHERE path = ?", [key])

    def remove_skipped(self, keys: list[str]) -> None:
        for key in keys:
            self.db.execute("DELETE FROM skipped WHERE path = ?", [key])

    # -------------------------------------------------------------- forgotten folders (imgtxt forget)
    def forgotten(self) -> list[str]:
        return [r["path"] for r in self.db.query("SELECT path FROM forgotten ORDER BY path")]

    def add_forgotten(self, path: str) -> None:
        self.db["forgotten"].upsert({"path": path_key(path), "path_bytes": path_bytes(path),
                                     "forgotten_at": now_iso()}, pk="path")

    def remove_forgotten(self, keys: list[str]) -> None:
        for key in keys:
            self.db.execute("DELETE FROM forgotten WHERE path = ?", [key])

    def checkpoint(self) -> None:
        """Copy the WAL into the .db file, so the file alone is the whole index (read-only and immutable
        readers ignore a WAL they cannot share)."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        self.db.close()
