"""Photo paths as the keys of the index: one text per file, also for names that are not valid UTF-8."""
from __future__ import annotations

import os


def path_key(path: str) -> str:
    """The text stored for a path, one per file. Non-UTF-8 names (surrogate-escaped by os.fsdecode) cannot go
    into an SQLite TEXT column, so their bad bytes are written \\xNN and their bytes kept in `path_bytes`; a
    literal backslash is doubled, so a file really named `caf\\xe9.jpg` gets another key than `caf<0xE9>.jpg`."""
    if "\\" not in path:
        try:
            path.encode("utf-8")
            return path
        except UnicodeEncodeError:
            pass
    return os.fsencode(path).replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def path_bytes(path: str) -> bytes | None:
    return None if path_key(path) == path else os.fsencode(path)


def real_path(key: str, raw: bytes | None) -> str:
    """The path to open for a stored row."""
    return os.fsdecode(raw) if raw else key


def is_under(key: str, roots: list[str]) -> bool:
    return any(key == r or key.startswith(r.rstrip(os.sep) + os.sep) for r in roots)
