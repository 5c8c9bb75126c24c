"""The index's photos rows as a comparison holds them: without their vectors, small, and the hash lookups."""
from __future__ import annotations

import sqlite3


class PhotoRow:
    """One photos row without its vector, read like a dict (row["size"]); a slotted object because a library
    of a million photos holds a million of these during an index run's comparison (~120 bytes each, not ~600)."""

    __slots__ = ("id", "path", "path_bytes", "size", "mtime_ns", "hash", "model_id", "ino", "ctime_ns")

    def __init__(self, id, path, path_bytes, size, mtime_ns, hash, model_id, ino=None, ctime_ns=None):  # noqa: A002
        self.id, self.path, self.path_bytes, self.size = id, path, path_bytes, size
        self.mtime_ns, self.hash, self.model_id = mtime_ns, hash, model_id
        self.ino, self.ctime_ns = ino, ctime_ns

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
