"""The index under faults (issue 8, items 1-7): offline folders, odd paths, damaged files, disk full, read-only.

Each test reproduces one failure of the adversarial run; the hostile-input items (8-15) are in
test_faults_hostile.py. Real CLI runs with the tiny real model; crashes are checked in real subprocesses.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess

import numpy as np
import pytest
from conftest import REPO, write_photo


def summary_of(result) -> dict:
    return json.loads(result.stdout)


def paths_in(lib) -> set[str]:
    conn = sqlite3.connect(lib.index / "index.db")
    try:
        return {r[0] for r in conn.execute("SELECT path FROM photos")}
    finally:
        conn.close()


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


def read_only_command(folder, command: list[str]) -> list[str] | None:
    """`command` run with `folder` read-only: a read-only bind mount for root (whom permissions do not stop),
    the folder's write bits removed otherwise. None when neither can be arranged."""
    if os.geteuid() != 0:
        for dirpath, _, files in os.walk(folder):
            os.chmod(dirpath, 0o555)
            for name in files:
                os.chmod(os.path.join(dirpath, name), 0o444)
        return command
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount --bind '{folder}' '{folder}' && "
             f"mount -o remount,bind,ro '{folder}' '{folder}'"], capture_output=True).returncode != 0:
        return None
    script = f"mount --bind '{folder}' '{folder}' && mount -o remount,bind,ro '{folder}' '{folder}' && exec \"$@\""
    return ["unshare", "-m", "sh", "-c", script, "sh", *command]


def imgtxt(*args) -> list[str]:
    return [str(REPO / ".venv" / "bin" / "imgtxt"), *map(str, args)]


# ------------------------------------------------------------------------------ 1. offline folders are kept

def test_indexing_one_folder_keeps_another_that_is_offline(library, tmp_path):
    write_photo(tmp_path / "drive" / "a1.jpg", seed=1)
    write_photo(tmp_path / "drive" / "sub" / "a2.jpg", seed=2)
    write_photo(tmp_path / "b" / "b1.jpg", seed=3)
    library.run("index", tmp_path / "drive", "-q")
    library.run("index", tmp_path / "b", "-q")
    os.rename(tmp_path / "drive", tmp_path / "unplugged")          # the drive is unplugged
    s = summary_of(library.run("index", tmp_path / "b", "--json", "-q"))
    assert (s["removed"], s["indexed"]) == (0, 3)
    assert len(paths_in(library)) == 3


@pytest.mark.parametrize("how", ["missing", "empty"])
def test_a_root_that_is_missing_or_empty_keeps_its_photos_unless_pruned(library, tmp_path, how):
    write_photo(tmp_path / "drive" / "a1.jpg", seed=1)
    write_photo(tmp_path / "drive" / "a2.jpg", seed=2)
    library.run("index", tmp_path / "drive", "-q")
    shutil.rmtree(tmp_path / "drive")
    if how == "empty":
        (tmp_path / "drive").mkdir()                                   # an empty mount point
    result = library.run("index", tmp_path / "drive", "--json")
    s = summary_of(result)
    assert (s["removed"], s["indexed"]) == (0, 2) and s["kept_offline"] == {str(tmp_path / "drive"): 2}
    assert "--prune" in result.stderr
    s = summary_of(library.run("index", tmp_path / "drive", "--json", "-q", "--prune"))
    assert (s["removed"], s["indexed"]) == (2, 0)


# ------------------------------------------------------------------------------ 2. one key per file

def test_a_non_utf8_name_and_its_escaped_spelling_are_two_photos(library, tmp_path):
    folder = tmp_path / "p"
    write_photo(folder / os.fsdecode(b"caf\xe9.jpg"), seed=1)
    write_photo(folder / "caf\\xe9.jpg", seed=2)                      # literally a backslash, x, e, 9
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["added"], s["indexed"]) == (2, 2)
    assert len(paths_in(library)) == 2


def test_version_1_keys_are_migrated_to_unique_ones(tmp_path):
    from imgtxt.library.migrations import MIGRATIONS, SCHEMA_VERSION
    from imgtxt.library.photo_paths import path_key, real_path
    from imgtxt.library.store import Store

    db = sqlite3.connect(tmp_path / "index.db")
    db.executescript(MIGRATIONS[0])
    raw = os.fsdecode(b"/p/caf\xe9.jpg")
    old = [("/p/caf\\xe9.jpg", b"/p/caf\xe9.jpg"), ("/p/back\\slash.jpg", None), ("/p/plain.jpg", None)]
    for i, (key, raw_bytes) in enumerate(old):
        db.execute("INSERT INTO photos (path, path_bytes, size, mtime_ns, hash, embedding, model_id, indexed_at) "
                   "VALUES (?, ?, 1, 1, ?, x'00', 'm', 'now')", [key, raw_bytes, f"h{i}"])
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    store = Store(tmp_path)
    rows = store.photo_rows()
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert set(rows) == {path_key(raw), path_key("/p/back\\slash.jpg"), "/p/plain.jpg"}
    assert "/p/back\\\\slash.jpg" in rows                          # the literal backslash is now doubled
    assert {real_path(k, r["path_bytes"]) for k, r in rows.items()} == {raw, "/p/back\\slash.jpg", "/p/plain.jpg"}


# ------------------------------------------------------------------------------ 3. folders that cannot be looked at

def test_a_folder_beyond_path_max_is_reported_as_skipped(library, tmp_path):
    write_photo(tmp_path / "p" / "ok.jpg", seed=1)
    fd = os.open(tmp_path / "p", os.O_RDONLY)
    for _ in range(18):                                                # 18 x 251 characters > PATH_MAX (4096)
        os.mkdir("d" * 250, dir_fd=fd)
        inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    s = summary_of(library.run("index", tmp_path / "p", "--json", "-q"))
    assert s["indexed"] == 1
    assert any("path too long" in f["reason"] for f in s["skipped_files"]), s["skipped_files"]


# ------------------------------------------------------------------------------ 4. damaged vector files

@pytest.mark.parametrize("damage", ["garbled", "truncated", "empty", "add-garbled", "add-truncated",
                                    "ann-garbled", "ann-truncated", "ann-empty", "proj-garbled", "ann-intact"])
def test_a_damaged_vector_file_never_crashes_a_search(library, tmp_path, tiny_model, damage, monkeypatch):
    from imgtxt.library import vector_index
    from imgtxt.library.store import decode_vectors

    if damage.startswith(("ann", "proj")):   # an Annoy index: a garbled .ann would crash Annoy's loader (SIGSEGV)
        monkeypatch.setattr(vector_index, "EXACT_MAX", 5)
    for i in range(20):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)
    library.run("index", tmp_path / "p", "-q")
    if damage.startswith("add"):   # one more photo (5% of the build) is appended to the .add file
        write_photo(tmp_path / "p" / "20.jpg", seed=20)
        assert summary_of(library.run("index", tmp_path / "p", "--json", "-q"))["vector_index"].startswith(
            "vector index: appended 1")
    (target,) = library.index.glob(f"vectors-*.{damage.split('-')[0] if '-' in damage else 'vec'}")
    data = bytearray(target.read_bytes())
    if damage.endswith("garbled"):
        data[:] = np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes()
    target.write_bytes(bytes(data[: len(data) // 2]) if damage.endswith("truncated") else
                       b"" if damage.endswith("empty") else data)

    query = "a dog running on the beach"
    out = library.subprocess("search", query, "-n", "30", "--json")
    assert out.returncode == 0, out.stderr                             # no crash, no traceback
    if damage == "ann-intact":                                         # the control: Annoy answers, no notice
        assert not out.stderr.strip()
    else:
        assert one_line(out.stderr) and "imgtxt index" in out.stderr and "damaged" in out.stderr
    conn = sqlite3.connect(library.index / "index.db")
    rows = conn.execute("SELECT path, embedding FROM photos").fetchall()
    vectors = decode_vectors([e for _, e in rows], tiny_model.config["joint"]["embed_dim"])
    scores = tiny_model.scores(vectors, tiny_model.encode_text([query]))[:, 0]
    expected = [rows[i][0] for i in np.argsort(-scores, kind="stable")]
    assert [json.loads(line)["path"] for line in out.stdout.splitlines()] == expected   # exact search


# ------------------------------------------------------------------------------ 5. a damaged database

def corrupt(db_path):
    size = db_path.stat().st_size
    assert size > 3 * 4096
    with open(db_path, "r+b") as f:                                    # keep page 1 (header), garble the rest
        f.seek(4096)
        f.write(np.random.default_rng(1).integers(0, 256, size - 4096, dtype=np.uint8).tobytes())


def test_a_damaged_database_is_reported_and_rebuilt_without_losing_the_old_file(library, tmp_path):
    for i in range(30):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i, size=(64, 48))
    library.run("index", tmp_path / "p", "-q")
    db = library.index / "index.db"
    corrupt(db)
    damaged_bytes = db.read_bytes()
    for args in (["search", "a dog"], ["status"], ["index", tmp_path / "p"]):
        result = library.run(*args, ok=False)
        assert result.exit_code == 1 and one_line(result.stderr), (args, result.stderr)
        assert "damaged" in result.stderr and "--rebuild" in result.stderr
    assert db.read_bytes() == damaged_bytes                            # nothing touched it

    # A rebuild that dies half-way leaves the old file as it was.
    import imgtxt.library.indexer

    class Killed(Exception):
        pass

    def interrupted(self, to_embed):
        raise Killed
    original = imgtxt.library.indexer.IndexRun.embed
    imgtxt.library.indexer.IndexRun.embed = interrupted
    try:
        with pytest.raises(Killed):
            library.run("index", tmp_path / "p", "--rebuild", ok=False)
    finally:
        imgtxt.library.indexer.IndexRun.embed = original
    assert db.read_bytes() == damaged_bytes

    s = summary_of(library.run("index", tmp_path / "p", "--rebuild", "--json", "-q"))
    assert s["indexed"] == 30
    assert (library.index / "index.db.damaged").read_bytes() == damaged_bytes
    assert not (library.index / "index.db.rebuild").exists()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert len(library.run("search", "a dog", "-n", "50", "--json").stdout.splitlines()) == 30


# ------------------------------------------------------------------------------ 6. one line, never a traceback

def test_disk_full_during_a_commit_keeps_the_committed_photos(library, tmp_path, monkeypatch):
    import imgtxt.library.indexer
    from imgtxt.library.store import Store

    for i in range(4):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)
    library.run("index", tmp_path / "p", "-q")
    for i in range(4, 200):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)

    class FullDisk(Store):   # SQLite's own "database or disk is full" (SQLITE_FULL), ~16 KB from now
        def __init__(self, *args, **kwargs):   # (the tiny model's rows take ~350 B with the indexes: 196 need ~68 KB)
            super().__init__(*args, **kwargs)
            pages, size = (self.db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
            self.db.execute(f"PRAGMA max_page_count={pages + max(1, 16384 // size)}")

    monkeypatch.setattr(imgtxt.library.indexer, "Store", FullDisk)
    result = library.run("index", tmp_path / "p", "--batch-size", "4", ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "full" in result.stderr
    conn = sqlite3.connect(library.index / "index.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    committed = conn.execute("SELECT count(*) FROM photos").fetchone()[0]
    assert 4 < committed < 200                                  # the batches before the full one stayed
    assert len(library.run("search", "a dog", "-n", "200", "--json").stdout.splitlines()) == 4  # old vector files


def test_disk_full_while_saving_the_vector_file(library, tmp_path, monkeypatch):
    from imgtxt.library import vector_build

    write_photo(tmp_path / "p" / "0.jpg", seed=0)
    library.run("index", tmp_path / "p", "-q")
    before = sorted(p.name for p in library.index.glob("vectors-*"))
    write_photo(tmp_path / "p" / "1.jpg", seed=1)                      # 1 added to a build of 1: a full rebuild

    def no_space(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_fsync = vector_build._fsync
    monkeypatch.setattr(vector_build, "_fsync", no_space)
    result = library.run("index", tmp_path / "p", ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "No space left" in result.stderr
    # No half-written file left: the build went to a .tmp that is removed; rows appended to the .add file before
    # the rebuild was chosen are past its recorded length, ignored by searches and cut by the next run.
    assert sorted(p.name for p in library.index.glob("vectors-*") if p.suffix != ".add") == before
    monkeypatch.setattr(vector_build, "_fsync", real_fsync)   # not undo(): that would drop the fixture's index env
    out = library.subprocess("search", "a dog", "--json")               # the old files, still valid
    assert out.returncode == 0 and len(out.stdout.splitlines()) >= 1 and not out.stderr.strip(), out.stderr
    assert summary_of(library.run("index", tmp_path / "p", "--json", "-q"))["indexed"] == 2


def test_indexing_into_a_read_only_folder_is_one_line(library, tmp_path):
    write_photo(tmp_path / "p" / "0.jpg", seed=0)
    library.index.mkdir()
    command = read_only_command(library.index, imgtxt("index", tmp_path / "p", "--model", library.model))
    if command is None:
        pytest.skip("cannot make a read-only folder here")
    out = subprocess.run(command, env=library.env, capture_output=True, text=True)
    assert out.returncode == 1 and one_line(out.stderr) and "cannot write the index" in out.stderr, out.stderr


def edit_model(src, dst, change_json=None, change_tensors=None):
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    if change_json:
        config = json.loads((dst / "model.json").read_text())
        change_json(config)
        (dst / "model.json").write_text(json.dumps(config))
    if change_tensors:
        tensors = load_file(str(dst / "model.safetensors"))
        change_tensors(tensors)
        save_file(tensors, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("name, json_edit, tensor_edit, message", [
    ("no-joint", lambda c: c.pop("joint"), None, "lacks the 'joint' section"),
    ("dim-text", lambda c: c["joint"].update(embed_dim="64"), None, "joint.embed_dim has the wrong type"),
    ("not-object", lambda c: c["features"].update(raw_dim=None), None, "features.raw_dim has the wrong type"),
    ("backbone", lambda c: c["features"].update(backbone="alexnet"), None, "unknown backbone 'alexnet'"),
    ("shape", None, lambda t: t.update({"gru.bias_hh": t["gru.bias_hh"][:-1]}), "tensor gru.bias_hh has shape"),
    ("fne-stats", None, lambda t: t.update({"fne.std": t["fne.std"][:10]}), "tensor fne.std has shape"),
    ("image-hidden", lambda c: c["joint"].update(image_hidden="1000"), None, "joint.image_hidden must be a size"),
    ("image-bias", lambda c: c["joint"].update(image_bias=True), None, r"missing tensors \['image_bias'\]"),
])
def test_a_malformed_model_is_refused_at_load(tiny_model_dir, tmp_path, library, name, json_edit, tensor_edit,
                                              message):
    from imgtxt.model.modelfile import ModelError, TrainedModel

    folder = edit_model(tiny_model_dir, tmp_path / name, json_edit, tensor_edit)
    with pytest.raises(ModelError, match=message):
        TrainedModel.load(folder)
    write_photo(tmp_path / "p" / "0.jpg", seed=0)
    result = library.run("index", tmp_path / "p", "--model", folder, ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "unusable model" in result.stderr


@pytest.mark.parametrize("name, tensor_edit, message", [
    ("head", lambda t: t.update({"text_head.linear.weight": t["text_head.linear.weight"][:, :-1]}),
     "tensor text_head.linear.weight has shape"),
    ("int8-layer", lambda t: t.update({"minilm.encoder.layer.5.output.dense.weight":
                                       t["minilm.encoder.layer.5.output.dense.weight"][:, :100]}),
     "tensor minilm.encoder.layer.5.output.dense.weight has shape"),
    ("int8-scale", lambda t: t.update({"minilm.encoder.layer.0.intermediate.dense.weight.scale":
                                       t["minilm.encoder.layer.0.intermediate.dense.weight.scale"][:7]}),
     "weight.scale has shape"),
])
def test_a_minilm_model_with_a_wrong_tensor_is_refused_at_load(tmp_path, library, name, tensor_edit, message):
    """The shipped kind's text tensors are checked when the model loads, not when the first query runs."""
    from imgtxt.model.modelfile import ModelError, TrainedModel
    from imgtxt.paths import default_model_dir

    folder = edit_model(default_model_dir(), tmp_path / name, None, tensor_edit)
    with pytest.raises(ModelError, match=message):
        TrainedModel.load(folder)
    write_photo(tmp_path / "p" / "0.jpg", seed=0)
    result = library.run("index", tmp_path / "p", "--model", folder, ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "unusable model" in result.stderr, result.stderr


def test_the_backbone_list_matches_the_torch_free_copy():
    from imgtxt.model.backbones import BACKBONES
    from imgtxt.model.modelfile import BACKBONE_NAMES

    assert BACKBONE_NAMES == BACKBONES


# ------------------------------------------------------------------------------ 7. a read-only index

def test_a_read_only_index_can_be_searched(library, tmp_path):
    for i in range(3):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)
    library.run("index", tmp_path / "p", "-q")
    assert not (library.index / "index.db-wal").exists() or (library.index / "index.db-wal").stat().st_size == 0
    for command in (["search", "a dog", "--json"], ["status", "--json"]):
        wrapped = read_only_command(library.index, imgtxt(*command))
        if wrapped is None:
            pytest.skip("cannot make a read-only folder here")
        out = subprocess.run(wrapped, env=library.env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        if command[0] == "search":
            assert len(out.stdout.splitlines()) == 3
        else:
            assert json.loads(out.stdout)["photos"] == 3
