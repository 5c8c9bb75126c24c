"""The photo index on disk: an SQLite database (the source of truth) in an index folder.

  <index dir>/index.db           photos (one row per photo, with its embedding), skipped files, meta
  <index dir>/vectors-<model>-*     the search files kept in step with it (see vector_index.py)
  <index dir>/index.lock         held by a running `imgtxt index`

The index folder is, in order: `--index DIR`, $IMGTXT_INDEX_DIR, $XDG_DATA_HOME/imgtxt, ~/.local/share/imgtxt.

Writers go through sqlite-utils (`Store`); the query path opens the file read-only with the standard
library's sqlite3 (`open_readonly`), because importing sqlite-utils alone costs 0.4 s of a search.
WAL mode lets searches read the last committed state while an index run writes.
"""
from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

INDEX_ENV = "IMGTXT_INDEX_DIR"
DB_NAME = "index.db"
SCHEMA_VERSION = 1


class StoreError(Exception):
    """An index that cannot be used: missing, empty, locked, or written by a newer imgtxt."""


def default_index_dir() -> Path:
    if os.environ.get(INDEX_ENV):
        return Path(os.environ[INDEX_ENV])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "imgtxt"


def resolve_index_dir(option: Path | str | None) -> Path:
    return Path(option) if option else default_index_dir()


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def now_precise() -> str:
    """indexed_at: to the microsecond, so that vector_index.sync can tell rows written after its last pass
    ("...:05.000001+00:00" sorts after "...:05+00:00", which older versions wrote)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# ------------------------------------------------------------------------------- paths as keys

def path_key(path: str) -> str:
    """The text stored for a path. Non-UTF-8 names (surrogate-escaped by os.fsdecode) cannot go into an
    SQLite TEXT column, so they are shown with backslash escapes and their bytes kept in `path_bytes`."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def path_bytes(path: str) -> bytes | None:
    return None if path_key(path) == path else os.fsencode(path)


def real_path(key: str, raw: bytes | None) -> str:
    """The path to open for a stored row."""
    return os.fsdecode(raw) if raw else key


def is_under(key: str, roots: list[str]) -> bool:
    return any(key == r or key.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


# ------------------------------------------------------------------------------- vectors

# Vectors are stored as float16: half the database of float32 (a 1 KB blob per photo in a 512-d space) with
# the same val recall for the shipped model (rsum 266.54 both; 99.99% of top-10s unchanged, bench/vector_storage.py).
# Rows written as float32 by earlier versions are still read: the blob's length says which.
VECTOR_DTYPE = np.float16


def encode_vector(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()


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


def vector_chunks(conn: sqlite3.Connection, model_id: str, dim: int, since: tuple[int, str] | None = None,
                  chunk: int = 8192):
    """(ids int64, vectors float32 (M, D)) of the photos embedded by `model_id`, streamed in id order.
    `since` (max id, time): only rows added after that id or (re-)embedded at or after that time."""
    sql = "SELECT id, embedding FROM photos WHERE model_id = ?"
    params: list = [model_id]
    if since is not None:
        sql += " AND (id > ? OR indexed_at >= ?)"
        params += list(since)
    cursor = conn.execute(sql + " ORDER BY id", params)
    while rows := cursor.fetchmany(chunk):
        yield np.array([r[0] for r in rows], np.int64), decode_vectors([r[1] for r in rows], dim)


# ------------------------------------------------------------------------------- schema

# Each migration takes the database from version i to i + 1; never edit one that has shipped.
MIGRATIONS = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
    -- AUTOINCREMENT: ids are never reused, so a vector file built earlier can never map to another photo.
    CREATE TABLE photos (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        path TEXT NOT NULL UNIQUE,
        path_bytes BLOB,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        hash TEXT NOT NULL,
        width INTEGER,
        height INTEGER,
        embedding BLOB NOT NULL,
        model_id TEXT NOT NULL,
        indexed_at TEXT NOT NULL
    );
    CREATE INDEX photos_hash ON photos (hash);
    CREATE INDEX photos_model ON photos (model_id);
    CREATE TABLE skipped (
        path TEXT PRIMARY KEY,
        path_bytes BLOB,
        size INTEGER,
        mtime_ns INTEGER,
        reason TEXT NOT NULL,
        seen_at TEXT NOT NULL
    );
    """,
]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _check_not_newer(version: int, db_path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(f"the index at {db_path.parent} was written by a newer imgtxt (schema v{version}, "
                         f"this one reads up to v{SCHEMA_VERSION}); upgrade imgtxt or use another --index")


def open_readonly(index_dir: Path) -> sqlite3.Connection:
    """A read-only connection for queries; never creates or migrates anything."""
    db_path = Path(index_dir) / DB_NAME
    if not db_path.is_file():
        raise StoreError(f"no index at {index_dir}: run `imgtxt index FOLDER` first (or pass --index DIR)")
    try:
        conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
        version = _schema_version(conn)
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{db_path}: not a readable imgtxt index ({e})") from None
    _check_not_newer(version, db_path)
    if version < SCHEMA_VERSION:
        raise StoreError(f"the index at {index_dir} is from an older imgtxt: run `imgtxt index` once to upgrade it")
    return conn


def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


class PhotoRow:
    """One photos row without its vector, read like a dict (row["size"]); a slotted object because a library
    of a million photos holds a million of these during an index run's comparison (~120 bytes each, not ~600)."""

    __slots__ = ("id", "path", "path_bytes", "size", "mtime_ns", "hash", "model_id")

    def __init__(self, id, path, path_bytes, size, mtime_ns, hash, model_id):  # noqa: A002 - the column names
        self.id, self.path, self.path_bytes, self.size = id, path, path_bytes, size
        self.mtime_ns, self.hash, self.model_id = mtime_ns, hash, model_id

    def __getitem__(self, column: str):
        return getattr(self, column)

    def __eq__(self, other) -> bool:
        return isinstance(other, PhotoRow) and all(self[c] == other[c] for c in self.__slots__)


class KnownHashes:
    """Membership test against the photos' hashes of one model (an indexed lookup, ~20 us)."""

    def __init__(self, conn: sqlite3.Connection, model_id: str):
        self.conn, self.model_id = conn, model_id

    def __contains__(self, content_hash: str) -> bool:
        sql = "SELECT 1 FROM photos WHERE hash = ? AND +model_id = ? LIMIT 1"
        return self.conn.execute(sql, [content_hash, self.model_id]).fetchone() is not None


class Store:
    """Read-write access for `imgtxt index`: creates the folder and database, applies migrations."""

    def __init__(self, index_dir: Path | str):
        import sqlite_utils

        self.index_dir = Path(index_dir)
        self.index_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.index_dir / DB_NAME
        try:
            self.db = sqlite_utils.Database(self.db_path)
            version = _schema_version(self.db.conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.db_path}: not a readable imgtxt index ({e})") from None
        _check_not_newer(version, self.db_path)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
        self.db.execute("PRAGMA busy_timeout=10000")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.db.atomic():
                for statement in MIGRATIONS[target - 1].split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version={target}")

    # -------------------------------------------------------------- meta
    def meta(self) -> dict[str, str]:
        return read_meta(self.db.conn)

    def set_meta(self, **values: str) -> None:
        self.db["meta"].upsert_all([{"key": k, "value": str(v)} for k, v in values.items()], pk="key")

    # -------------------------------------------------------------- photos
    def iter_photo_rows(self) -> Iterator[PhotoRow]:
        """Every photos row (without the embedding), streamed: a comparison holds only the rows it keeps."""
        models: dict[str, str] = {}  # one string per model id, not one per row
        cursor = self.db.conn.execute("SELECT id, path, path_bytes, size, mtime_ns, hash, model_id FROM photos")
        while chunk := cursor.fetchmany(10_000):
            for i, path, raw, size, mtime_ns, content_hash, model_id in chunk:
                yield PhotoRow(i, path, raw, size, mtime_ns, content_hash, models.setdefault(model_id, model_id))

    def photo_rows(self) -> dict[str, PhotoRow]:
        """path -> row (without the embedding)."""
        return {row.path: row for row in self.iter_photo_rows()}

    def hashes_with_vectors(self, model_id: str) -> "KnownHashes":
        """`hash in store.hashes_with_vectors(model)`: asked of the hash index per file, so a run with little
        to do never loads a million hashes (~110 MB)."""
        return KnownHashes(self.db.conn, model_id)

    def rows_with_hash(self, content_hash: str, model_id: str) -> list[dict]:
        # `+model_id`: look rows up by the hash index; with one model in the index, SQLite would otherwise
        # pick the model index and read every row (34 ms a photo at 20k photos, minutes at 1M).
        sql = "SELECT id, path, path_bytes, embedding, width, height FROM photos WHERE hash = ? AND +model_id = ?"
        return list(self.db.query(sql, [content_hash, model_id]))

    def put_photo(self, path: str, size: int, mtime_ns: int, content_hash: str, width, height,
                  embedding: bytes | np.ndarray, model_id: str) -> None:
        key = path_key(path)
        if isinstance(embedding, np.ndarray):
            embedding = encode_vector(embedding)
        row = {"path": key, "path_bytes": path_bytes(path), "size": size, "mtime_ns": mtime_ns,
               "hash": content_hash, "width": width, "height": height, "embedding": embedding,
               "model_id": model_id, "indexed_at": now_precise()}
        # Update in place when the path is known, so the photo keeps its id.
        cur = self.db.execute(
            "UPDATE photos SET path_bytes=:path_bytes, size=:size, mtime_ns=:mtime_ns, hash=:hash, width=:width, "
            "height=:height, embedding=:embedding, model_id=:model_id, indexed_at=:indexed_at WHERE path=:path", row)
        if cur.rowcount == 0:
            self.db["photos"].insert(row)
        self.db.execute("DELETE FROM skipped WHERE path = ?", [key])
        # In the same transaction as the vector: the vector files are behind until vector_index.sync clears it.
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('vectors_dirty', '1')")

    def move_photo(self, photo_id: int, new_path: str, size: int, mtime_ns: int) -> None:
        key = path_key(new_path)
        self.db.execute("DELETE FROM photos WHERE path = ? AND id != ?", [key, photo_id])  # a file moved over it
        self.db.execute("UPDATE photos SET path=?, path_bytes=?, size=?, mtime_ns=? WHERE id=?",
                        [key, path_bytes(new_path), size, mtime_ns, photo_id])
        self.db.execute("DELETE FROM skipped WHERE path = ?", [key])

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

    def put_skipped(self, path: str, reason: str, size: int | None = None, mtime_ns: int | None = None) -> None:
        key = path_key(path)
        self.db["skipped"].upsert({"path": key, "path_bytes": path_bytes(path), "size": size, "mtime_ns": mtime_ns,
                                   "reason": reason, "seen_at": now_iso()}, pk="path")
        self.db.execute("DELETE FROM photos WHERE path = ?", [key])

    def remove_skipped(self, keys: list[str]) -> None:
        for key in keys:
            self.db.execute("DELETE FROM skipped WHERE path = ?", [key])

    def close(self) -> None:
        self.db.close()
