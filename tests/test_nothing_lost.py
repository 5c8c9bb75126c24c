"""Nothing lost, nothing mixed up: a rebuild of some folders keeps the others and never overwrites a backup, a
photo that cannot be read for a moment (permissions, a sync client truncating it, a model giving NaN) keeps
its row, and a vector is always the one of the bytes its hash names."""
from __future__ import annotations

import json
import os
import sqlite3

import pytest
from conftest import write_photo


def summary_of(result) -> dict:
    return json.loads(result.stdout.splitlines()[-1])


def rows(library) -> dict[str, tuple]:
    conn = sqlite3.connect(library.index / "index.db")
    try:
        return {p: (h, e) for p, h, e in conn.execute("SELECT path, hash, embedding FROM photos")}
    finally:
        conn.close()


class Killed(BaseException):
    """kill -9 at a chosen point: nothing after it runs."""


# ------------------------------------------------------------------------------ --rebuild of some folders

def test_a_rebuild_of_one_folder_keeps_the_others_reuses_vectors_and_never_overwrites_a_backup(library, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(2):
        write_photo(a / f"{i}.jpg", seed=i)
        write_photo(b / f"{i}.jpg", seed=10 + i)
    library.run("index", a, b, "-q")
    before = rows(library)
    first = library.run("index", a, "--rebuild", "--json", "-q")
    s = summary_of(first)
    assert (s["indexed"], s["embedded"]) == (4, 0), s           # B kept, A's vectors reused by content
    assert "kept the 2 photos of other folders" in first.stderr
    assert rows(library) == before
    backup = (library.index / "index.db.damaged").read_bytes()
    write_photo(a / "new.jpg", seed=5)
    s = summary_of(library.run("index", a, "--rebuild", "--json", "-q"))
    assert (s["indexed"], s["embedded"]) == (5, 1), s
    assert (library.index / "index.db.damaged").read_bytes() == backup   # the first backup is never overwritten
    assert (library.index / "index.db.damaged.1").is_file()
    s = summary_of(library.run("index", a, b, "--json", "-q"))
    assert (s["indexed"], s["embedded"], s["unchanged"]) == (5, 0, 5), s
    folders = json.loads(library.run("status", "--json").stdout)["folders"]
    assert {f["path"] for f in folders} == {str(a), str(b)}


def test_a_plain_run_clears_what_a_killed_rebuild_left(library, tmp_path, monkeypatch):
    from imgtxt.library.indexer import IndexRun

    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    library.run("index", folder, "-q")

    def killed(self, *args):
        raise Killed
    with monkeypatch.context() as m:
        m.setattr(IndexRun, "finish", killed)
        with pytest.raises(Killed):
            library.run("index", folder, "--rebuild", "-q")
    assert (library.index / "index.db.rebuild").exists()
    (library.index / "index.db.damaged.tmp").write_bytes(b"half a copy")
    result = library.run("index", folder, "-q")
    assert "removed the unfinished rebuild" in result.stderr
    left = sorted(p.name for p in library.index.iterdir() if p.name.startswith("index.db."))
    assert left == [], left
