"""The index database's schema, as numbered migrations (PRAGMA user_version is the number applied).

Each migration takes the database from version i to i + 1 in one transaction; never edit one that has shipped.
`tests/test_store.py` checks that a database migrated from every earlier version equals a fresh one.
"""
from __future__ import annotations

import os
import sqlite3

from .photo_paths import path_bytes, path_key

SCHEMA_VERSION = 6

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
    "CREATE INDEX photos_hash_model ON photos (hash, model_id)",  # O(1) reuse of a known photo's vector
    # `imgtxt forget`: folders and photos kept out of later index runs until one is given to `index` again
    """
    CREATE TABLE forgotten (
        path TEXT PRIMARY KEY,
        path_bytes BLOB,
        forgotten_at TEXT NOT NULL
    )
    """,
    # The write generation of a vector (meta vec_generation + 1 when written): the search files take the rows
    # past the generation they were synced at, whatever the clock says (an NTP step back, two machines).
    "ALTER TABLE photos ADD COLUMN generation INTEGER NOT NULL DEFAULT 0",
    # A file's inode and ctime when it was indexed: size + mtime alone are not its identity (two photos of equal
    # size and mtime swapping names, cp + touch -r). NULL in rows of earlier versions: filled by the next run.
    "ALTER TABLE photos ADD COLUMN ino INTEGER; ALTER TABLE photos ADD COLUMN ctime_ns INTEGER",
    # What people remember of a photo besides what it shows (photo_facts.py): when (EXIF, else the file's
    # mtime), where (GPS and the nearest named place) and the words of its folder and name. Filled by the next
    # `index` run from the files' headers, without re-embedding; (path, size, mtime_ns) say which version.
    """
    CREATE TABLE photo_facts (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        taken TEXT,
        taken_offset TEXT,
        taken_from TEXT NOT NULL,
        latitude REAL,
        longitude REAL,
        city TEXT,
        region TEXT,
        country TEXT
    );
    CREATE INDEX photo_facts_taken ON photo_facts (taken);
    CREATE TABLE photo_words (word TEXT NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (word, id)) WITHOUT ROWID;
    CREATE INDEX photo_words_id ON photo_words (id)
    """,
]
assert len(MIGRATIONS) == SCHEMA_VERSION


def rekey_paths(conn) -> None:
    """v1 -> v2: v1 keys were not unique (a backslash in a name was stored as is); recompute every key that
    contains a backslash from the bytes of its path."""
    for table in ("photos", "skipped"):
        rows = conn.execute(f"SELECT rowid, path, path_bytes FROM {table} WHERE path LIKE '%\\%'").fetchall()
        for rowid, _, _ in rows:  # two passes: a new key may equal another row's old key
            conn.execute(f"UPDATE {table} SET path = ? WHERE rowid = ?", [f"\0rekey{rowid}", rowid])
        for rowid, key, raw in rows:
            path = os.fsdecode(raw) if raw else key
            conn.execute(f"UPDATE {table} SET path = ?, path_bytes = ? WHERE rowid = ?",
                         [path_key(path), path_bytes(path), rowid])


POST_MIGRATION = {2: rekey_paths}


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def migrate(db, version: int) -> None:
    """Apply the migrations after `version` to a sqlite_utils Database, each in its own transaction."""
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with db.atomic():
            for statement in MIGRATIONS[target - 1].split(";"):
                if statement.strip():
                    db.execute(statement)
            if target in POST_MIGRATION:
                POST_MIGRATION[target](db.conn)
            db.execute(f"PRAGMA user_version={target}")
