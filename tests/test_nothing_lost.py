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


def test_a_rebuild_keeps_what_it_cannot_look_at_now(library, tmp_path):
    """An unplugged root, a photo truncated for a moment: kept by a rebuild as by a plain run."""
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(2):
        write_photo(a / f"{i}.jpg", seed=i)
        write_photo(b / f"{i}.jpg", seed=10 + i)
    library.run("index", a, b, "-q")
    before = {p: h for p, (h, _) in rows(library).items()}
    whole = (a / "0.jpg").read_bytes()
    (a / "0.jpg").write_bytes(whole[: len(whole) // 3])
    b.rename(tmp_path / "b-unplugged")
    s = summary_of(library.run("index", a, b, "--rebuild", "--json"))
    assert (s["indexed"], s["embedded"], s["removed"]) == (4, 0, 0), s
    assert {p: h for p, (h, _) in rows(library).items()} == before
    (tmp_path / "b-unplugged").rename(b)
    (a / "0.jpg").write_bytes(whole)
    s = summary_of(library.run("index", a, b, "--json", "-q"))
    assert (s["indexed"], s["embedded"]) == (4, 0), s


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


def test_a_root_missing_from_the_start_is_missing_not_vanished(library, tmp_path):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    library.run("index", folder, "-q")
    folder.joinpath("a.jpg").unlink()
    folder.rmdir()
    result = library.run("index", folder, "--prune", "-q")
    assert "cannot be reached (missing)" in result.stderr and "vanished" not in result.stderr, result.stderr


# ------------------------------------------------------------------------------ unreadable for now: the row stays

class LockedEntry:
    """A directory entry as an unprivileged user sees it in a folder without its x bit: listed, not stat-able."""

    def __init__(self, entry):
        self._entry, self.name, self.path = entry, entry.name, entry.path

    def stat(self, **kwargs):
        raise PermissionError(13, "Permission denied", self.path)

    def is_symlink(self):
        return False

    def is_dir(self, **kwargs):
        return self._entry.is_dir(follow_symlinks=False)


class LockedListing:
    def __init__(self, listing):
        self.listing = listing

    def __enter__(self):
        return [LockedEntry(e) for e in self.listing.__enter__()]

    def __exit__(self, *exc):
        return self.listing.__exit__(*exc)


def test_a_folder_without_its_x_bit_keeps_its_photos(library, tmp_path, monkeypatch):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "sub" / "b.jpg", seed=2)
    library.run("index", folder, "-q")
    before = rows(library)
    real_scandir = os.scandir
    locked = str(folder / "sub")   # chmod 644 sub, as a user other than root sees it
    monkeypatch.setattr(os, "scandir", lambda path=".": LockedListing(real_scandir(path)) if str(path) == locked
                        else real_scandir(path))
    for args in ([], ["--prune"]):
        s = summary_of(library.run("index", folder, "--json", "-q", *args))
        assert (s["removed"], s["indexed"]) == (0, 2) and s["skipped_reasons"] == {"permission denied": 1}, s
        assert rows(library) == before


def test_a_photo_truncated_or_emptied_for_a_moment_keeps_its_row(library, tmp_path):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    library.run("index", folder, "-q")
    before = rows(library)
    whole = (folder / "a.jpg").read_bytes()
    for damaged in (whole[: len(whole) // 2], b""):      # a sync client rewriting it
        (folder / "a.jpg").write_bytes(damaged)
        result = library.run("index", folder, "--json")
        s = summary_of(result)
        assert (s["removed"], s["indexed"], s["skipped"]) == (0, 2, 1), s
        assert "kept its earlier vector" in result.stderr
        assert rows(library) == before
    (folder / "a.jpg").write_bytes(whole)
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["embedded"], s["indexed"], s["skipped"]) == (0, 2, 0), s
    (folder / "a.jpg").unlink()                          # gone for good: removed
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["removed"], s["indexed"]) == (1, 1), s


def test_a_model_giving_nan_never_removes_a_good_vector(library, tmp_path, monkeypatch):
    import numpy as np

    from imgtxt.model.modelfile import TrainedModel

    folder = tmp_path / "p"
    for i in range(3):
        write_photo(folder / f"{i}.jpg", seed=i)
    library.run("index", folder, "-q")
    before = rows(library)
    monkeypatch.setattr(TrainedModel, "embed_images", lambda self, squares: np.full((len(squares), 64), np.nan))
    real_load = TrainedModel.load.__func__

    def another_model(cls, *args, **kwargs):             # damaged weights are another model (another id)
        model = real_load(cls, *args, **kwargs)
        model.model_id = "broken-000000000000"
        return model
    monkeypatch.setattr(TrainedModel, "load", classmethod(another_model))
    for name in ("0.jpg", "1.jpg", "2.jpg"):
        (folder / name).touch()
    write_photo(folder / "1.jpg", seed=11)               # changed: needs the (broken) model
    result = library.run("index", folder, "--json")
    s = summary_of(result)
    assert s["removed"] == 0 and "no usable vector" in result.stderr, s
    assert rows(library) == before


# ------------------------------------------------------------------------------ a vector is of its hash's bytes

def fresh_vector(model_dir, path):
    """The vector a clean index would store for the bytes at `path` now (as float16, as stored)."""
    import numpy as np

    from imgtxt.library.photo_work import Work, decode
    from imgtxt.model.modelfile import TrainedModel

    model = TrainedModel.load(model_dir)
    square, _, _ = decode(Work(str(path), 0, 0, None), model.image_embedder().resize_size)
    return np.asarray(model.embed_images(square[None])[0], np.float16)


def stored_vector(library, path):
    import numpy as np

    conn = sqlite3.connect(library.index / "index.db")
    try:
        content, blob = conn.execute("SELECT hash, embedding FROM photos WHERE path = ?", [str(path)]).fetchone()
    finally:
        conn.close()
    return content, np.frombuffer(blob, np.float16)


def assert_true_to_its_bytes(library, path):
    import numpy as np

    from imgtxt.library.photo_work import file_hash

    content, vector = stored_vector(library, path)
    assert content == file_hash(str(path)), path
    np.testing.assert_allclose(vector, fresh_vector(library.model, path), atol=2e-3)


def replaced_after_first_open(monkeypatch, target, replacement: bytes):
    """The file at `target` is replaced (a new inode, as editors and sync clients write) right after the first
    open of it by photo_work: that reader keeps the old bytes, every later one gets the new ones."""
    from imgtxt.library import photo_work

    real = photo_work.regular_opener
    done = []

    def opener(path, flags=os.O_RDONLY):
        fd = real(path, flags)
        if os.fspath(path) == str(target) and not done:
            done.append(True)
            tmp = str(target) + ".new"
            with open(tmp, "wb") as f:
                f.write(replacement)
            os.replace(tmp, target)
        return fd
    monkeypatch.setattr(photo_work, "regular_opener", opener)


def test_a_photo_rewritten_while_it_is_indexed_is_stored_with_the_hash_of_the_bytes_embedded(library, tmp_path,
                                                                                              monkeypatch):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    other = write_photo(tmp_path / "other.jpg", seed=2).read_bytes()
    replaced_after_first_open(monkeypatch, folder / "a.jpg", other)
    library.run("index", folder, "-q")
    assert_true_to_its_bytes(library, folder / "a.jpg")


def test_a_thumbnail_made_during_a_rewrite_is_of_the_bytes_its_name_says(tmp_path, monkeypatch):
    import numpy as np
    from PIL import Image

    from imgtxt.library import thumbnails
    from imgtxt.library.photo_work import file_hash

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    photo = write_photo(tmp_path / "a.jpg", seed=1, size=(64, 48))
    first = photo.read_bytes()
    red = tmp_path / "red.jpg"
    Image.new("RGB", (64, 48), (255, 0, 0)).save(red)
    replaced_after_first_open(monkeypatch, photo, red.read_bytes())
    made = thumbnails.thumbnail(str(photo), 32)
    kept = tmp_path / "first.jpg"
    kept.write_bytes(first)
    if made.stem == file_hash(str(kept)):      # named after the first bytes: must show them, not the red picture
        assert np.asarray(Image.open(made))[..., 0].mean() < 200
    else:
        assert made.stem == file_hash(str(photo))


@pytest.mark.parametrize("how", ["mv both ways", "cp + touch -r"])
def test_two_photos_of_equal_size_and_mtime_that_swap_names_swap_vectors(library, tmp_path, how):
    import shutil

    folder = tmp_path / "p"
    a = write_photo(folder / "a.bmp", seed=1, size=(64, 48))
    b = write_photo(folder / "b.bmp", seed=2, size=(64, 48))
    assert a.stat().st_size == b.stat().st_size
    os.utime(a, ns=(10**18, 10**18))
    os.utime(b, ns=(10**18, 10**18))
    library.run("index", folder, "-q")
    if how == "mv both ways":
        os.rename(a, folder / "t.bmp")
        os.rename(b, a)
        os.rename(folder / "t.bmp", b)
    else:
        shutil.copyfile(b, a)                                # a now holds b's bytes, in a's inode
        os.utime(a, ns=(10**18, 10**18))
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert s["embedded"] == 0, s                          # the bytes are known: vectors reused, by content
    for path in (a, b):
        assert_true_to_its_bytes(library, path)


# ------------------------------------------------------------------------------ leftovers and names

def test_vector_files_left_by_a_killed_cleanup_go_with_the_next_run_and_a_folder_in_their_place_is_no_error(
        library, tmp_path):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    library.run("index", folder, "-q")
    current = {p.name for p in library.index.glob("vectors-*")}
    stale = library.index / "vectors-tiny-000000000000-deadbeef.vec"   # an old generation a kill left behind
    stale.write_bytes(b"\0" * 64)
    library.run("index", folder, "-q")                                  # nothing changed: no build
    assert not stale.exists() and {p.name for p in library.index.glob("vectors-*")} == current
    vec = next(library.index.glob("vectors-*.vec"))
    vec.unlink()
    vec.mkdir()                                                        # the search file replaced by a folder
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert s["vector_index"].startswith("vector index: rebuilt"), s
    assert len(library.run("search", "a photo", "--json").stdout.splitlines()) == 1


def test_a_write_error_names_the_file():
    from pathlib import Path

    from imgtxt.library.store import write_error

    error = write_error(Path("idx"), IsADirectoryError(21, "Is a directory", "idx/vectors-m-1.vec"))
    assert "Is a directory (idx/vectors-m-1.vec)" in str(error)


def test_a_huge_batch_size_never_gives_the_cnn_more_than_its_bound(library, tmp_path, monkeypatch):
    from imgtxt.library import indexer
    from imgtxt.model.modelfile import TrainedModel

    monkeypatch.setattr(indexer, "CNN_BATCH_MAX", 3)
    sizes = []
    embed = TrainedModel.embed_images

    def spy(self, squares):
        sizes.append(len(squares))
        held.append(len(squares if squares.base is None else squares.base))   # the decoded photos stacked at once
        return embed(self, squares)
    held: list[int] = []
    monkeypatch.setattr(TrainedModel, "embed_images", spy)
    for i in range(7):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i, size=(64, 48))
    s = summary_of(library.run("index", tmp_path / "p", "--batch-size", "1024", "--json", "-q"))
    assert s["indexed"] == 7 and sizes == [3, 3, 1], sizes
    assert max(held) <= 3, held   # not the whole commit's photos: they grew with --batch-size too


def test_a_photo_that_can_no_longer_be_read_keeps_its_row(library, tmp_path, monkeypatch):
    """chmod 000 (as a user other than root sees it): the mode change alters its ctime, so it is opened again."""
    from imgtxt.library import photo_work

    folder = tmp_path / "p"
    locked = write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    library.run("index", folder, "-q")
    before = rows(library)
    os.chmod(locked, 0)
    real = photo_work.regular_opener

    def opener(path, flags=os.O_RDONLY):
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, flags)
    monkeypatch.setattr(photo_work, "regular_opener", opener)
    result = library.run("index", folder, "--json")
    s = summary_of(result)
    assert (s["removed"], s["indexed"], s["skipped_reasons"]) == (0, 2, {"permission denied": 1}), s
    assert "kept its earlier vector" in result.stderr and rows(library) == before


def test_a_rebuild_keeps_what_a_damaged_old_index_still_gives(library, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_photo(a / "0.jpg", seed=0)
    write_photo(b / "0.jpg", seed=1)
    library.run("index", a, b, "-q")
    db = library.index / "index.db"
    with sqlite3.connect(db) as conn:                    # B with many photos: the table spans many pages
        row = conn.execute("SELECT * FROM photos WHERE path = ?", [str(b / "0.jpg")]).fetchone()
        names = [d[0] for d in conn.execute("SELECT * FROM photos LIMIT 0").description]
        for i in range(1, 400):
            values = dict(zip(names, row), id=None, path=str(b / f"{i}.jpg"), path_bytes=None)
            conn.execute(f"INSERT INTO photos ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                         [values[n] for n in names])
    conn.close()
    size = db.stat().st_size
    with open(db, "r+b") as f:                           # the last pages garbled: the last rows cannot be read
        f.seek(size - 16384)
        f.write(b"\xff" * 16384)
    result = library.run("index", a, "--rebuild", "--json")
    s = summary_of(result)
    assert "read only in part" in result.stderr, result.stderr
    assert 1 + 1 < s["indexed"] < 401, s                  # A, and the part of B the old file still gives


def test_a_folder_forgotten_while_a_rebuild_was_stopped_stays_forgotten(library, tmp_path, monkeypatch):
    from imgtxt import Library
    from imgtxt.library.indexer import IndexRun

    a, b = tmp_path / "a", tmp_path / "b"
    write_photo(a / "0.jpg", seed=0)
    write_photo(a / "sub" / "1.jpg", seed=1)
    write_photo(b / "sub" / "2.jpg", seed=2)
    library.run("index", a, b, "-q")

    def killed(self, *args):
        raise Killed
    with monkeypatch.context() as m:                      # a rebuild of A stopped after its first transactions
        m.setattr(IndexRun, "finish", killed)
        with pytest.raises(Killed):
            library.run("index", a, "--rebuild", "-q")
    Library(library.index, library.model).forget(a / "sub")
    Library(library.index, library.model).forget(b / "sub")
    library.run("index", a, "--rebuild", "-q")          # continued
    assert set(rows(library)) == {str(a / "0.jpg")}


def test_a_rebuild_while_the_only_root_is_unplugged_keeps_it_and_its_stamps(library, tmp_path):
    """Found by the stateful test: such a rebuild refused ("no photos") after copying rows without their stamps,
    and the next rebuild trusted those rows by size and mtime alone."""
    a = tmp_path / "a"
    one = write_photo(a / "p0.bmp", seed=0, size=(32, 24), fmt="BMP")
    two = write_photo(a / "sub" / "p2.bmp", seed=3, size=(32, 24), fmt="BMP")
    for path in (one, two):
        os.utime(path, ns=(10**18, 10**18))
    library.run("index", a, "-q")
    a.rename(tmp_path / "a-away")                        # unplugged
    s = summary_of(library.run("index", a, "--rebuild", "--json", "-q"))
    assert (s["indexed"], s["kept_offline"]) == (2, {str(a): 2}), s
    (tmp_path / "a-away").rename(a)
    os.rename(one, tmp_path / "t.bmp")                   # the two swap names; sizes and mtimes are equal
    os.rename(two, one)
    os.rename(tmp_path / "t.bmp", two)
    library.run("index", a, "--rebuild", "-q")
    for path in (one, two):
        assert_true_to_its_bytes(library, path)


def test_a_photo_skipped_as_unreadable_is_indexed_once_it_can_be_read(library, tmp_path, monkeypatch):
    """Found by the stateful test: chmod 000, a run (skipped), chmod back: neither size nor mtime changed, and the
    photo was never tried again."""
    from imgtxt.library import photo_work

    folder = tmp_path / "p"
    locked = write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    real = photo_work.regular_opener

    def opener(path, flags=os.O_RDONLY):
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, flags)
    with monkeypatch.context() as m:
        m.setattr(photo_work, "regular_opener", opener)
        s = summary_of(library.run("index", folder, "--json", "-q"))
        assert (s["indexed"], s["skipped_reasons"]) == (1, {"permission denied": 1}), s
    s = summary_of(library.run("index", folder, "--json", "-q"))   # readable again
    assert (s["indexed"], s["skipped"]) == (2, 0), s


def test_a_settled_photo_is_hashed_once_and_a_write_after_its_hash_is_seen(tmp_path, monkeypatch):
    """decode reuses the hash that hash_work took when the file's stamp is unchanged since (a settled file); a
    write in place after the hash, or a file too recently changed to trust its stamp, is hashed again."""
    import time

    import numpy as np

    from imgtxt.library import photo_work
    from imgtxt.library.photo_work import Work, decode, file_hash, hash_work

    path = write_photo(tmp_path / "a.jpg", seed=1)
    assert hash_work(Work(str(path), 0, 0, None)).hashed is None          # just written: not settled
    monkeypatch.setattr(photo_work, "SETTLED_SECONDS", -1.0)              # ... counted as settled from here
    hashed = []
    real = photo_work.content_hash
    monkeypatch.setattr(photo_work, "content_hash", lambda data: hashed.append(len(data)) or real(data))

    work = hash_work(Work(str(path), 0, 0, None))
    assert work.hashed is not None and work.hash == file_hash(str(path))
    square = decode(work, 64)[0]
    assert hashed == [] and work.hash == file_hash(str(path))             # not hashed again
    np.testing.assert_array_equal(square, decode(Work(str(path), 0, 0, None), 64)[0])

    work = hash_work(Work(str(path), 0, 0, None))
    time.sleep(0.05)                                                      # past the clock tick of the hash
    other = write_photo(tmp_path / "b.jpg", seed=2).read_bytes()
    with open(path, "r+b") as f:                                          # same inode, new bytes
        f.write(other)
        f.truncate()
    decode(work, 64)
    assert len(hashed) == 2 and work.hash == file_hash(str(path)) == real(other)
