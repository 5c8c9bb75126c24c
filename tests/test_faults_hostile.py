"""The index against hostile files and input (issue 8, items 8-15): FIFOs and devices, many copies, huge
queries, names used in paths, a planted lock link, a planted pickle, control characters, nan, file modes."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO, copy_examples, write_photo

HANG_LIMIT_S = 300   # generous: the run loads torch and the CNN in a fresh process on a busy 2-core machine


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


def run_index_script(library, folder, setup: str, timeout: int = HANG_LIMIT_S):
    """run_index in a subprocess (a hang fails the test instead of blocking it), after `setup` code."""
    script = textwrap.dedent(f"""
        import json, os, sys
        import imgtxt.library.indexer as ix
        from imgtxt.model.modelfile import TrainedModel
        folder = {str(folder)!r}
    """) + textwrap.dedent(setup) + textwrap.dedent(f"""
        s = ix.run_index({str(library.index)!r}, [folder], TrainedModel.load({str(library.model)!r}), log=lambda m: None)
        print(json.dumps(s.as_dict()))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], env=library.env, capture_output=True, text=True,
                             timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the index run hung for {timeout} s")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


# ------------------------------------------------------------------------------ 8. never block on a FIFO or device

SWAP_FOR_FIFO = """
def swap_after(method):
    original = getattr(ix.IndexRun, method)
    def wrapped(self, *args):
        result = original(self, *args)
        path = os.path.join(folder, "b.jpg")
        os.unlink(path)
        os.mkfifo(path)       # the photo becomes a FIFO after it was scanned ({phase})
        return result
    setattr(ix.IndexRun, method, wrapped)
swap_after({method!r})
"""


@pytest.mark.parametrize("method", ["compare", "reuse_known_content"])   # before hashing, before decoding
def test_a_photo_replaced_by_a_fifo_does_not_hang_the_run(library, tmp_path, method):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    s = run_index_script(library, folder, SWAP_FOR_FIFO.format(method=method, phase=method), timeout=HANG_LIMIT_S)
    assert s["indexed"] == 1 and s["skipped_reasons"] == {"not a regular file": 1}


def test_a_database_row_naming_a_device_is_never_opened(library, tmp_path):
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    library.run("index", tmp_path / "p", "-q")
    conn = sqlite3.connect(library.index / "index.db")
    conn.execute("INSERT INTO photos (path, size, mtime_ns, hash, embedding, model_id, indexed_at) "
                 "VALUES ('/dev/zero', 0, 0, 'x', x'00', 'another-model', 'now')")
    conn.commit()
    conn.close()
    s = run_index_script(library, tmp_path / "p", "", timeout=HANG_LIMIT_S)
    assert s["indexed"] == 1


def test_photos_are_opened_only_as_regular_files(tmp_path):
    from imgtxt.model.images import ImageError, load_rgb

    os.mkfifo(tmp_path / "fifo.jpg")
    for path in (tmp_path / "fifo.jpg", "/dev/zero"):
        with pytest.raises(ImageError, match="not a regular file"):
            load_rgb(path)


# ------------------------------------------------------------------------------ 9. copies cost O(1) each

def test_copies_in_one_run_are_embedded_once(library, tmp_path):
    original = write_photo(tmp_path / "p" / "0.jpg", seed=1)
    for i in range(1, 30):
        shutil.copy2(original, tmp_path / "p" / f"{i}.jpg")
    s = json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)
    assert (s["added"], s["embedded"], s["indexed"]) == (30, 1, 30)


def sqlite_work_to_add_copies(library, folder, count, monkeypatch) -> int:
    """SQLite virtual-machine steps (in hundreds) of an index run that adds `count` copies of a known photo."""
    import imgtxt.library.indexer
    from imgtxt.library.store import Store

    for i in range(count):
        shutil.copy2(folder / "0.jpg", folder / f"copy{count}-{i}.jpg")
    steps = [0]

    class Counting(Store):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.db.conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)

    monkeypatch.setattr(imgtxt.library.indexer, "Store", Counting)
    s = json.loads(library.run("index", folder, "--json", "-q").stdout)
    assert (s["added"], s["embedded"]) == (count, 0)
    return steps[0]


def test_reusing_a_known_vector_costs_the_same_for_every_copy(library, tmp_path, monkeypatch):
    folder = tmp_path / "p"
    write_photo(folder / "0.jpg", seed=1, size=(640, 480))
    library.run("index", folder, "-q")
    few = sqlite_work_to_add_copies(library, folder, 25, monkeypatch)
    many = sqlite_work_to_add_copies(library, folder, 200, monkeypatch)
    # Linear work grows 8x (plus the rows already there); one query per copy returning every earlier copy
    # with its vector (issue 8: 20,000 copies took > 10 minutes) grows ~60x.
    assert many < 16 * few, (few, many)


# ------------------------------------------------------------------------------ 10. bounded queries

def test_a_huge_query_is_refused_at_once(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat"])
    library.run("index", tmp_path / "p", "-q")
    result = library.run("search", "a dog " * 20000, ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "query too long" in result.stderr


def test_n_never_asks_for_more_than_the_index_holds(library, tmp_path, monkeypatch):
    from imgtxt.library import vector_index

    copy_examples(tmp_path / "p")
    library.run("index", tmp_path / "p", "-q")
    asked = []
    search = vector_index.VectorIndex.search

    def recording_search(self, query, want, score_fn):
        asked.append(want)
        return search(self, query, want, score_fn)

    monkeypatch.setattr(vector_index.VectorIndex, "search", recording_search)
    hits = library.run("search", "a dog", "-n", "1000000", "--json").stdout.splitlines()
    assert len(hits) == 6 and asked and max(asked) <= 6       # the photos indexed, no dead rows


# ------------------------------------------------------------------------------ 11. names in paths

def test_a_model_name_cannot_write_outside_the_cache(library, tmp_path, facts):
    from tiny_model import build_tiny_model

    from imgtxt.model.modelfile import TrainedModel

    model = build_tiny_model(tmp_path / "evil-model", facts, name="../../escaped/pwned")
    assert "/" not in TrainedModel.load(model).model_id
    photo = copy_examples(tmp_path / "p", ["cat"])[0]
    captions = tmp_path / "caps.txt"
    captions.write_text("a cat\na dog\n")
    library.run("caption", photo, "--model", model, "--captions", captions)
    cache = tmp_path / "cache" / "captions"
    assert not (tmp_path / "escaped").exists()
    assert len(list(cache.glob("*.npy"))) == 1


# ------------------------------------------------------------------------------ 12. the lock file

def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(library, tmp_path):
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me\n")
    library.index.mkdir()
    os.symlink(victim, library.index / "index.lock")
    result = library.run("index", tmp_path / "p", ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "symbolic link" in result.stderr
    assert victim.read_text() == "do not truncate me\n"


# ------------------------------------------------------------------------------ 13. training state without pickle

def tiny_training_data():
    from tiny_model import WORDS

    from imgtxt.model.vocab import Vocabulary
    from imgtxt.research.train import TrainData

    rng = np.random.default_rng(0)
    vocab = Vocabulary(WORDS)
    tokens = [list(rng.integers(2, len(vocab), 5)) for _ in range(40)]
    return TrainData(rng.normal(size=(8, 16)).astype(np.float32), tokens, rng.normal(size=(4, 16)).astype(np.float32),
                     tokens[:20], vocab, ["a dog"] * 40, {"kind": "baseline"})


class Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_training_resumes_with_the_safe_loader_and_refuses_a_planted_pickle(tmp_path):
    import torch

    from imgtxt.research.train import preset, train

    data = tiny_training_data()
    cfg = preset("SH", embed_dim=8, word_dim=8, max_epochs=1, patience=5)
    train(tmp_path / "run", data, cfg)
    cfg.max_epochs = 2
    best = train(tmp_path / "run", data, cfg)                          # resumed through weights_only=True
    assert best["epoch"] >= 1 and len((tmp_path / "run" / "log.jsonl").read_text().splitlines()) == 2

    marker = tmp_path / "code-ran"
    torch.save({"model": Planted(str(marker))}, tmp_path / "run" / "state.pt")
    with pytest.raises(SystemExit, match="not a training state imgtxt can load safely"):
        train(tmp_path / "run", data, cfg)
    assert not marker.exists()

    # the offline snapshot average reads the run's snapshots through the same safe loader
    from imgtxt.research.checkpoints import average_saved_snapshots
    (tmp_path / "run" / "snapshots").mkdir(exist_ok=True)
    torch.save({"state": Planted(str(marker)), "epoch": 1}, tmp_path / "run" / "snapshots" / "planted.pt")
    with pytest.raises(SystemExit, match="not a training state imgtxt can load safely"):
        average_saved_snapshots(tmp_path / "run", tmp_path / "averaged")
    assert not marker.exists()


# ------------------------------------------------------------------------------ 14. control characters in names

def test_control_characters_in_names_are_escaped_and_nul_output_is_exact(library, tmp_path):
    folder = tmp_path / "p"
    names = ["plain.jpg", "clear\x1b[2J.jpg", "two\nlines.jpg", "tab\there.jpg"]
    for i, name in enumerate(names):
        write_photo(folder / name, seed=i)
    library.run("index", folder, "-q")
    tsv = library.subprocess("search", "a dog", "-n", "10").stdout
    lines = tsv.splitlines()
    assert len(lines) == 4 and all(len(line.split("\t")) == 3 for line in lines)
    assert "\x1b" not in tsv and "clear\\x1b[2J.jpg" in tsv and "two\\nlines.jpg" in tsv
    raw = subprocess.run([str(REPO / ".venv" / "bin" / "imgtxt"), "search", "a dog", "-0"], env=library.env,
                         capture_output=True).stdout
    assert raw.endswith(b"\0") and set(raw[:-1].split(b"\0")) == {os.fsencode(str(folder / n)) for n in names}


def test_nul_output_gives_the_real_bytes_of_a_non_utf8_name(library, tmp_path):
    name = os.fsdecode(b"caf\xe9.jpg")
    write_photo(tmp_path / "p" / name, seed=1)
    library.run("index", tmp_path / "p", "-q")
    raw = subprocess.run([str(REPO / ".venv" / "bin" / "imgtxt"), "search", "a dog", "-0"], env=library.env,
                         capture_output=True).stdout
    assert raw == os.fsencode(str(tmp_path / "p" / name)) + b"\0"


# ------------------------------------------------------------------------------ 15. nan, and private files

def test_min_score_nan_is_refused(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat"])
    library.run("index", tmp_path / "p", "-q")
    for value in ("nan", "inf", "-1e400"):
        result = library.run("search", "a cat", "--min-score", value, ok=False)
        assert result.exit_code == 1 and one_line(result.stderr), result.stderr
        assert "--min-score must be a finite number" in result.stderr


def test_a_new_index_is_private_and_an_existing_folder_keeps_its_mode(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat"])
    old = os.umask(0o022)
    try:
        library.run("index", tmp_path / "p", "-q")
        assert stat.S_IMODE(library.index.stat().st_mode) == 0o700
        for name in ("index.db", "index.lock"):
            assert stat.S_IMODE((library.index / name).stat().st_mode) == 0o600, name
        for i in range(11):
            write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)
        library.run("index", tmp_path / "p", "-q")                   # a build of 12 photos ...
        write_photo(tmp_path / "p" / "11.jpg", seed=11)
        library.run("index", tmp_path / "p", "-q")                   # ... and one appended: the .add file
        vector_files = list(library.index.glob("vectors-*"))
        assert {p.suffix for p in vector_files} == {".vec", ".add"}
        for path in vector_files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
        shared = tmp_path / "shared-index"
        shared.mkdir(mode=0o755)
        os.chmod(shared, 0o755)
        library.run("index", tmp_path / "p", "-q", "--index", shared)
        assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    finally:
        os.umask(old)
