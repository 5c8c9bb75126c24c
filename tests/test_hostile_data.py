"""The index's data against hostile timing and values: a rebuild killed inside its swap, the clock stepping back,
NaN vectors, crafted meta values, a lock taken between two steps, temporary files left by a full disk."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
from conftest import write_photo


def summary_of(result) -> dict:
    return json.loads(result.stdout.splitlines()[-1])


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


def two_photos(library, tmp_path):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    library.run("index", folder, "-q")
    return folder


# ------------------------------------------------------------------------------ the --rebuild swap

class Killed(BaseException):
    """kill -9 at a chosen point: nothing after it runs."""


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_a_rebuild_killed_at_any_step_of_its_swap_leaves_an_index(library, tmp_path, step):
    folder = two_photos(library, tmp_path)
    calls = []

    def killing(real):
        def call(src, dst, *args, **kwargs):
            if "index.db" in os.fspath(src) + os.fspath(dst):   # the swap's file operations, not the vector files'
                calls.append((src, dst))
                if len(calls) > step:
                    raise Killed
            return real(src, dst, *args, **kwargs)
        return call

    real_replace, real_link = os.replace, os.link
    os.replace, os.link = killing(real_replace), killing(real_link)
    try:
        library.run("index", folder, "--rebuild", "-q")
    except Killed:
        pass
    finally:
        os.replace, os.link = real_replace, real_link
    assert (library.index / "index.db").is_file(), f"no index.db after {calls}"
    assert library.run("search", "a photo", "--json").stdout.count("\n") == 2
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["embedded"], s["indexed"]) == (0, 2)


def test_an_orphaned_complete_rebuild_is_swapped_in_not_re_embedded(library, tmp_path):
    """The state an earlier imgtxt left when killed between its two renames."""
    folder = two_photos(library, tmp_path)
    shutil.copy2(library.index / "index.db", library.index / "index.db.rebuild")
    os.rename(library.index / "index.db", library.index / "index.db.damaged")
    result = library.run("search", "a photo", ok=False)
    assert result.exit_code == 1 and "interrupted" in result.stderr
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["embedded"], s["indexed"]) == (0, 2)
    assert not (library.index / "index.db.rebuild").exists()


# ------------------------------------------------------------------------------ the clock stepping back

def test_an_edited_photo_reaches_the_search_files_when_the_clock_stepped_back(library, tmp_path, monkeypatch):
    from imgtxt.library import store, vector_build, vector_index

    monkeypatch.setattr(vector_index, "REBUILD_FRACTION", 100.0)   # append, as a large library would
    folder = two_photos(library, tmp_path)
    write_photo(folder / "b.jpg", seed=3)                          # edited
    yesterday = "2001-01-01T00:00:00.000000+00:00"                 # an NTP step back, another machine's clock
    monkeypatch.setattr(store, "now_precise", lambda: yesterday)
    monkeypatch.setattr(vector_build, "now_precise", lambda: yesterday)
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert s["updated"] == 1 and s["vector_index"].startswith("vector index: appended 1"), s


# ------------------------------------------------------------------------------ NaN never in, never out

def test_a_nan_vector_never_enters_the_index(library, tmp_path, monkeypatch):
    from imgtxt.model.modelfile import TrainedModel

    embed = TrainedModel.embed_images

    def first_is_nan(self, squares):
        vectors = np.array(embed(self, squares))
        vectors[0] = np.nan
        return vectors

    monkeypatch.setattr(TrainedModel, "embed_images", first_is_nan)
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    result = library.run("index", folder, "--json", "--batch-size", "2")
    s = summary_of(result)
    assert (s["indexed"], s["skipped"]) == (1, 1) and "no usable vector" in result.stderr, s


def test_a_nan_row_is_never_a_result(library, tmp_path):
    folder = two_photos(library, tmp_path)
    dim = 2 * len(sqlite3.connect(library.index / "index.db").execute("SELECT embedding FROM photos").fetchone()[0])
    with sqlite3.connect(library.index / "index.db") as conn:       # a damaged or crafted row
        conn.execute("UPDATE photos SET embedding = ? WHERE path = ?",
                     [np.full(dim // 4, np.nan, np.float16).tobytes(), str(folder / "b.jpg")])
    for path in library.index.glob("vectors-*"):
        path.unlink()                                               # searched from SQLite, with a notice
    result = library.run("search", "a photo", "--json", "--min-score", "-1000000")
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "NaN" not in result.stdout and json.loads(lines[0])["path"].endswith("a.jpg")


# ------------------------------------------------------------------------------ queries without words

@pytest.mark.parametrize("query", ["🐶🐶🐶", "!!!", "🌊 ✨"])
def test_a_query_of_emoji_or_symbols_alone_is_refused(query):
    from imgtxt.model.modelfile import TrainedModel

    assert "no words" in TrainedModel.load().check_query(query)
    assert TrainedModel.load().check_query("a dog 🐶 on a beach") is None


# ------------------------------------------------------------------------------ crafted meta values

HUGE = "99999999999999999999999"   # past SQLite's 64-bit integers


@pytest.mark.parametrize("key, value", [("folders", "{"), ("folders", "[1, 2]"), ("embed_dim", "x"),
                                        ("similarity", "x"), ("vec_count", "many"), ("model_folder", 7),
                                        ("vec_generation", "-" + HUGE), ("vec_generation", HUGE),
                                        ("vec_generation", str((1 << 63) - 1)), ("vec_max_id", HUGE),
                                        ("vec_count", HUGE), ("vec_add", HUGE), ("vec_dim", "-" + HUGE),
                                        ("embed_dim", HUGE), ("embed_dim", "12345"), ("vec_live", HUGE)])
def test_crafted_meta_values_are_one_line_in_every_command(library, tmp_path, key, value):
    folder = two_photos(library, tmp_path)
    with sqlite3.connect(library.index / "index.db") as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", [value, key])
    status = library.run("status", ok=False)
    assert "Traceback" not in status.stderr and (status.exit_code == 0 or one_line(status.stderr))
    forget = library.run("forget", folder / "a.jpg", ok=False)
    assert "Traceback" not in forget.stderr and (forget.exit_code == 0 or one_line(forget.stderr)), forget.stderr
    if forget.exit_code != 0:   # refused before removing anything
        assert sqlite3.connect(library.index / "index.db").execute("SELECT count(*) FROM photos").fetchone()[0] == 2
    index = library.run("index", folder, "-q", ok=False)
    assert index.exit_code == 0, index.stderr                       # a run writes the values anew


def test_a_damaged_write_generation_counts_as_the_highest_one_held(library, tmp_path, monkeypatch):
    """vec_generation out of range: the search files are rebuilt, and later edits still reach them, once each."""
    from imgtxt.library import vector_index
    from imgtxt.library.store import Store

    monkeypatch.setattr(vector_index, "REBUILD_FRACTION", 100.0)   # append, as a large library would
    folder = two_photos(library, tmp_path)
    with sqlite3.connect(library.index / "index.db") as conn:
        top = conn.execute("SELECT max(generation) FROM photos").fetchone()[0]
        conn.execute("UPDATE meta SET value = ? WHERE key = 'vec_generation'", ["-" + HUGE])
    store = Store(library.index)
    try:
        assert store.write_generation() == top + 1
    finally:
        store.close()
    write_photo(folder / "b.jpg", seed=3)
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert s["updated"] == 1 and s["vector_index"].startswith("vector index: rebuilt"), s
    write_photo(folder / "a.jpg", seed=4)
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert s["updated"] == 1 and s["vector_index"].startswith("vector index: appended 1"), s
    lines = library.run("search", "a photo", "--json", "-n", "10").stdout.splitlines()
    found = [json.loads(line)["path"] for line in lines]
    assert sorted(found) == [str(folder / "a.jpg"), str(folder / "b.jpg")], found


# ------------------------------------------------------------------------------ the lock, leftovers

def test_a_run_holds_its_lock_until_the_folders_are_saved(library, tmp_path, monkeypatch):
    """Another process taking index.lock right after the run's work must not fail the completed run."""
    import fcntl

    from imgtxt.library import indexer

    release = indexer.IndexLock.__exit__
    taken = []

    def release_then_lose_the_race(self, *exc):
        release(self, *exc)
        other = open(self.path, "rb")  # noqa: SIM115 (held past this call)  another run takes the lock in the gap
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        taken.append(other)

    monkeypatch.setattr(indexer.IndexLock, "__exit__", release_then_lose_the_race)
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    try:
        result = library.run("index", tmp_path / "p", "--json", "-q", ok=False)
    finally:
        for other in taken:
            other.close()
    assert result.exit_code == 0 and summary_of(result)["indexed"] == 1, result.stderr
    status = json.loads(library.run("status", "--json").stdout)
    assert str(tmp_path / "p") in json.dumps(status)


def test_a_full_cache_leaves_no_partial_caption_file(tiny_model, tmp_path, monkeypatch):
    import errno

    from imgtxt.library import query

    def disk_full(file, array):
        file.write(b"\x93NUMPY partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(query.np, "save", disk_full)
    vectors = query.caption_vectors(tiny_model, ["a dog", "a cat"])
    assert vectors.shape[0] == 2
    assert not [p.name for p in (tmp_path / "cache").rglob("*.tmp")]


@pytest.mark.parametrize("cache", ["caption vectors", "thumbnail", "weights digest"])
def test_ctrl_c_while_writing_a_cache_leaves_no_temporary_file(tiny_model, tiny_model_dir, tmp_path, monkeypatch,
                                                               cache):
    """KeyboardInterrupt is no OSError: each cache writer removes its temporary file on any failure."""
    from imgtxt.library import query, thumbnails
    from imgtxt.model import model_config

    def ctrl_c(*args, **kwargs):
        if args and hasattr(args[0], "write"):
            args[0].write(b"\x93NUMPY partial")
        raise KeyboardInterrupt

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(KeyboardInterrupt):
        if cache == "caption vectors":
            monkeypatch.setattr(query.np, "save", ctrl_c)
            query.caption_vectors(tiny_model, ["a dog", "a cat"])
        elif cache == "thumbnail":
            photo = write_photo(tmp_path / "a.jpg", seed=1)
            monkeypatch.setattr(os, "replace", ctrl_c)       # the data written, the rename not yet done
            thumbnails.thumbnail(str(photo), 64)
        else:
            monkeypatch.setattr(os, "replace", ctrl_c)
            model_config.remember_weights(tiny_model_dir / "model.safetensors", "0" * 64)
    monkeypatch.undo()
    assert (tmp_path / "cache").is_dir()                       # the writer got as far as its folder
    left = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file() and ".tmp" in p.name]
    assert not left, left


def test_a_full_cache_leaves_no_partial_cnn_graph(tiny_model, tmp_path, monkeypatch):
    import errno

    pytest.importorskip("onnx")
    pytest.importorskip("torch")
    import onnx

    from imgtxt.model.cnn_export import export_for_model

    def disk_full(model, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(onnx, "save", disk_full)
    with pytest.raises(OSError):
        export_for_model(tiny_model, tmp_path / "cnn" / "graph.onnx")
    assert list((tmp_path / "cnn").iterdir()) == []


def test_a_photo_from_after_2262_is_indexed(library, tmp_path):
    """`touch -d 2263-01-01`: past SQLite's 64-bit nanoseconds; one odd file must not stop every run."""
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    future = write_photo(folder / "future.jpg", seed=2)
    seconds = 9_247_000_000                                        # 2263
    try:
        os.utime(future, ns=(seconds * 10**9, seconds * 10**9))
    except (OSError, OverflowError):
        pytest.skip("this file system cannot hold that time")
    if os.stat(future).st_mtime_ns < 1 << 63:
        pytest.skip("this file system clamps the time itself")
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["indexed"], s["skipped"]) == (2, 0), s
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["unchanged"], s["embedded"]) == (2, 0), s
