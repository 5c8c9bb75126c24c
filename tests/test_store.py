"""The SQLite store: schema versions, paths that are not UTF-8, ids, vector encoding (no CNN)."""
from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from imgtxt.library.migrations import MIGRATIONS, SCHEMA_VERSION
from imgtxt.library.photo_paths import path_key, real_path
from imgtxt.library.store import (
    Store,
    StoreError,
    decode_vectors,
    default_index_dir,
    encode_vector,
    open_readonly,
)


def schema(db_path) -> list[tuple]:
    conn = sqlite3.connect(db_path)
    try:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(), key=str)
    finally:
        conn.close()


@pytest.mark.parametrize("start", range(1, SCHEMA_VERSION))
def test_a_database_migrated_from_each_earlier_version_equals_a_fresh_one(tmp_path, start):
    old = tmp_path / "old"
    old.mkdir()
    conn = sqlite3.connect(old / "index.db")
    for migration in MIGRATIONS[:start]:
        conn.executescript(migration)
    conn.execute(f"PRAGMA user_version={start}")
    conn.commit()
    conn.close()
    Store(old).close()
    Store(tmp_path / "fresh").close()
    assert schema(old / "index.db") == schema(tmp_path / "fresh" / "index.db")
    assert sqlite3.connect(old / "index.db").execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def vec(seed, dim=8):
    v = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return (v / np.linalg.norm(v)).tobytes()


def test_new_store_is_migrated_to_the_current_schema_in_wal_mode(tmp_path):
    store = Store(tmp_path / "ix")
    conn = sqlite3.connect(store.db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {"photos", "skipped", "meta"} <= set(store.db.table_names())
    store.close()
    Store(tmp_path / "ix").close()  # reopening an up-to-date store applies nothing and keeps working


def test_a_new_database_gets_large_pages_and_an_existing_one_keeps_its_own(tmp_path):
    from imgtxt.library.store import PAGE_SIZE

    Store(tmp_path / "new").close()
    assert sqlite3.connect(tmp_path / "new" / "index.db").execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    (tmp_path / "old").mkdir()
    with sqlite3.connect(tmp_path / "old" / "index.db") as conn:   # as an earlier imgtxt left it
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
    store = Store(tmp_path / "old")
    store.db.conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
    store.close()
    conn = sqlite3.connect(tmp_path / "old" / "index.db")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_an_index_from_a_newer_imgtxt_is_refused_with_a_clear_message(tmp_path):
    Store(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "index.db")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    for opener in (Store, open_readonly):
        with pytest.raises(StoreError, match="newer imgtxt"):
            opener(tmp_path)


def test_missing_and_garbage_indexes(tmp_path):
    with pytest.raises(StoreError, match="no index at"):
        open_readonly(tmp_path)
    (tmp_path / "index.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a readable imgtxt index"):
        open_readonly(tmp_path)


def test_index_dir_comes_from_env_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("IMGTXT_INDEX_DIR", str(tmp_path / "a"))
    assert default_index_dir() == tmp_path / "a"
    monkeypatch.delenv("IMGTXT_INDEX_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_index_dir() == tmp_path / "xdg" / "imgtxt"


def test_non_utf8_paths_round_trip(tmp_path):
    path = os.fsdecode(str(tmp_path).encode() + b"/caf\xe9.jpg")
    store = Store(tmp_path / "ix")
    store.put_photo(path, 10, 20, "h1", 4, 3, vec(0), "m")
    (row,) = store.photo_rows().values()
    assert row["path"] == path_key(path) and "\\xe9" in row["path"]
    assert real_path(row["path"], row["path_bytes"]) == path


def test_updates_keep_the_photo_id_and_moves_keep_the_vector(tmp_path):
    store = Store(tmp_path)
    store.put_photo("/p/a.jpg", 1, 1, "h1", 4, 3, vec(0), "m")
    first_id = store.photo_rows()["/p/a.jpg"]["id"]
    store.put_photo("/p/a.jpg", 2, 2, "h2", 4, 3, vec(1), "m")
    assert store.photo_rows()["/p/a.jpg"]["id"] == first_id
    store.move_photo(first_id, "/q/b.jpg", 2, 3)
    rows = store.photo_rows()
    assert list(rows) == ["/q/b.jpg"] and rows["/q/b.jpg"]["id"] == first_id
    assert store.vector_for_hash("h2", "m")["embedding"] == vec(1)


def test_ids_are_never_reused(tmp_path):
    store = Store(tmp_path)
    store.put_photo("/a.jpg", 1, 1, "h1", 1, 1, vec(0), "m")
    store.put_photo("/b.jpg", 1, 1, "h2", 1, 1, vec(1), "m")
    old = store.photo_rows()["/b.jpg"]["id"]
    store.remove_photos(["/b.jpg"])
    store.put_photo("/c.jpg", 1, 1, "h3", 1, 1, vec(2), "m")
    assert store.photo_rows()["/c.jpg"]["id"] > old  # an old vector file can never point at /c.jpg


def test_skipped_file_replaces_its_photo_row(tmp_path):
    store = Store(tmp_path)
    store.put_photo("/a.jpg", 1, 1, "h1", 1, 1, vec(0), "m")
    store.put_skipped("/a.jpg", "corrupt or truncated image", 5, 5)
    assert store.photo_rows() == {}
    assert store.skipped_rows()["/a.jpg"]["reason"] == "corrupt or truncated image"
    store.put_photo("/a.jpg", 6, 6, "h9", 1, 1, vec(0), "m")
    assert store.skipped_rows() == {}


def test_vectors_are_stored_as_float16_and_float32_rows_still_read():
    v = np.frombuffer(vec(3, dim=16), np.float32)
    blob = encode_vector(v)
    assert len(blob) == 2 * 16
    legacy = v.tobytes()                                  # written by an earlier imgtxt
    decoded = decode_vectors([blob, legacy], 16)
    assert decoded.dtype == np.float32 and np.array_equal(decoded[1], v)
    np.testing.assert_allclose(decoded[0], v, atol=1e-3)
    with pytest.raises(StoreError, match="damaged"):
        decode_vectors([b"123"], 16)
