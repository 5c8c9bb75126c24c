"""The index's meta table (key -> text): read as text whatever a crafted or damaged file holds, and each value
the code relies on checked when it is read (a one-line StoreError, or a safe default where losing the value only
changes a display), never a traceback."""
from __future__ import annotations

import json
import sqlite3

from .photo_paths import is_under, path_key


def _as_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    """key -> value, every value a str whatever a crafted or damaged file holds (a blob, a number, NULL)."""
    return {_as_text(k): _as_text(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}


COUNTER_MAX = 1 << 62   # past any real count, id or generation, and one more still fits SQLite's 64-bit integers


def meta_int(meta: dict[str, str], key: str, low: int = 1, high: int = COUNTER_MAX) -> int | None:
    """An integer meta value from `low` to `high`, or None when it is missing or damaged (a crafted value past
    SQLite's integers would otherwise be an OverflowError where it is written back or compared in SQL)."""
    try:
        value = int(meta[key])
    except (KeyError, ValueError):
        return None
    return value if low <= value <= high else None


def meta_folders(meta: dict[str, str]) -> list[str]:
    """The folders the user indexed (meta "folders", a JSON list); a damaged value counts as none recorded,
    which only changes how `status` groups the photos, and the next run writes it anew."""
    try:
        value = json.loads(meta.get("folders", "[]"))
    except (ValueError, RecursionError):
        return []
    return [f for f in value if isinstance(f, str)] if isinstance(value, list) else []


def write_folders(store, add=(), remove: str | None = None) -> None:
    """Record the folders the user indexed, for `status`; nested ones fold into their parent."""
    folders = set(meta_folders(store.meta())) | {path_key(a) for a in add}
    if remove is not None:
        folders = {f for f in folders if not is_under(f, [remove])}
    kept = sorted(f for f in folders if not any(f != g and is_under(f, [g]) for g in folders))
    store.set_meta(folders=json.dumps(kept))
