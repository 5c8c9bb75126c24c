"""The Python API (imgtxt.Library): README's example as written, copies, forget, folders, Ctrl-C, errors."""
from __future__ import annotations

import contextlib
import io
import re
import shutil
import sys

import pytest
from conftest import REPO, copy_examples, write_photo

import imgtxt
from imgtxt import ImgtxtError, Library


def readme_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- tests/test_library.py runs this block -->\s*```python\n(.*?)```", text, re.S)
    assert found, "README lost its Python API example"
    return found.group(1)


def test_readme_python_example_runs_as_written(tmp_path, monkeypatch):
    """The README block, verbatim, with the shipped model, from the repository root (it indexes examples/)."""
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IMGTXT_MODEL", raising=False)
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("6 added") and lines[0].endswith("6 photos searchable"), lines
    ranked = [line for line in lines if re.match(r"\d\. \d\.\d{3} ", line)]
    assert len(ranked) == 3 and all(line.endswith(".jpg") for line in ranked)
    assert any(line.startswith("caption:") for line in lines)
    assert "folders: 1, photos: 6" in lines
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, "the example's error case raised nothing"


def test_library_with_copies_forget_and_folders(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    photos = copy_examples(tmp_path / "a")
    shutil.copy2(photos[0], tmp_path / "a" / "copy-of-first.jpg")          # same bytes, another name
    write_photo(tmp_path / "b" / "x.jpg", seed=1)
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    summary = lib.index([tmp_path / "a", tmp_path / "b"])
    assert (summary.added, summary.indexed) == (8, 8)

    matches = lib.search("a cat sitting on a table", n=10)
    assert all(isinstance(m, imgtxt.PhotoMatch) for m in matches)
    assert len(matches) == 7                                                # 8 files, 7 distinct photos
    assert [m.rank for m in matches] == list(range(1, 8))
    with_copy = [m for m in matches if m.copies]
    assert len(with_copy) == 1
    pair = {with_copy[0].path, *with_copy[0].copies}
    assert pair == {str(photos[0]), str(tmp_path / "a" / "copy-of-first.jpg")}
    every = lib.search("a cat sitting on a table", n=10, all_copies=True)
    assert len(every) == 8 and not any(m.copies for m in every)

    status = lib.status()
    assert status.photos == 8 and status.model.startswith("tiny-")
    assert [(f.path, f.photos) for f in status.folders] == [(str(tmp_path / "a"), 7), (str(tmp_path / "b"), 1)]

    assert lib.forget(tmp_path / "b") == 1
    assert (tmp_path / "b" / "x.jpg").is_file()                             # the file itself stays
    status = lib.status()
    assert status.photos == 7 and [f.path for f in status.folders] == [str(tmp_path / "a")]
    assert str(tmp_path / "b" / "x.jpg") not in {m.path for m in lib.search("a dog", n=20, all_copies=True)}
    assert lib.forget(photos[1]) == 1 and lib.status().photos == 6
    with pytest.raises(ImgtxtError, match="nothing indexed"):
        lib.forget(tmp_path / "b")

    captions = lib.caption(photos[2], n=3)
    assert [c.rank for c in captions] == [1, 2, 3] and all(isinstance(c.text, str) for c in captions)
    similar = lib.similar(photos[2], n=3)
    assert len(similar) == 3 and str(photos[2]) not in {m.path for m in similar}
    record = lib.photo(similar[0].id)
    assert record.path == similar[0].path
    thumb = lib.thumbnail(similar[0].id, 64)
    assert thumb.is_file() and str(thumb).startswith(str(tmp_path / "cache"))   # never next to the photos
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        [p.name for p in photos if p != photos[1]] + ["copy-of-first.jpg", photos[1].name])


def interrupted_library(tmp_path, tiny_model_dir, monkeypatch):
    """10 photos and a Library whose third batch of embeddings raises KeyboardInterrupt (Ctrl-C); returns the
    library and the real embed_images, to put back."""
    from imgtxt.model.modelfile import TrainedModel

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    for i in range(10):
        write_photo(tmp_path / "p" / f"{i:02}.jpg", seed=i)
    batches = []
    real = TrainedModel.embed_images

    def embed_then_interrupt(self, squares):
        if len(batches) == 2:
            raise KeyboardInterrupt
        batches.append(len(squares))
        return real(self, squares)

    monkeypatch.setattr(TrainedModel, "embed_images", embed_then_interrupt)
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    return lib, real


def test_ctrl_c_keeps_committed_photos_searchable(tmp_path, tiny_model_dir, monkeypatch):
    """A first run interrupted mid-way: status and search answer from what was committed."""
    from imgtxt.model.modelfile import TrainedModel

    lib, real = interrupted_library(tmp_path, tiny_model_dir, monkeypatch)
    with pytest.raises(imgtxt.Interrupted) as stopped:
        lib.index([tmp_path / "p"], batch_size=3)
    assert stopped.value.saved == 6 and "run `imgtxt index` again" in str(stopped.value)
    assert lib.status().photos == 6 and lib.status().model.startswith("tiny-")
    assert len(lib.search("a dog", n=20)) == 6

    monkeypatch.setattr(TrainedModel, "embed_images", real)
    summary = lib.index([tmp_path / "p"])
    assert (summary.unchanged, summary.added, summary.indexed) == (6, 4, 10)


def test_ctrl_c_closes_the_progress_bar_before_the_message(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The index bar is closed when Ctrl-C stops the run: a bar left open is drawn again when it is garbage
    collected (at exit, below the CLI's `interrupted: ...` line), which reads as if the run went on."""
    import gc

    from tqdm import tqdm

    lib, _ = interrupted_library(tmp_path, tiny_model_dir, monkeypatch)
    try:
        lib.index([tmp_path / "p"], batch_size=3, progress=True)
    except imgtxt.Interrupted as stopped:   # the traceback keeps the run's frames, and its bar, alive here
        assert [bar for bar in getattr(tqdm, "_instances", ()) if bar.total == 10] == []
        print(f"imgtxt: {stopped}", file=sys.stderr)   # what the CLI prints next
    else:
        pytest.fail("the run was not interrupted")
    gc.collect()
    err = capsys.readouterr().err
    assert "photo" in err.split("imgtxt: interrupted")[0]   # the bar was drawn, before the message
    assert err.rstrip("\n").endswith("run `imgtxt index` again to continue"), err[-300:]


def test_errors_share_one_base():
    from imgtxt.library.query import QueryError
    from imgtxt.library.store import StoreError
    from imgtxt.model.backbones import BackboneError
    from imgtxt.model.images import ImageError
    from imgtxt.model.modelfile import ModelError
    from imgtxt.research.datasets import DatasetError

    for error in (BackboneError, DatasetError, ImageError, ModelError, QueryError, StoreError):
        assert issubclass(error, ImgtxtError)


def test_missing_index_and_bad_model_are_imgtxt_errors(tmp_path):
    with pytest.raises(ImgtxtError, match="no index at"):
        Library(tmp_path / "none").search("a dog")
    with pytest.raises(ImgtxtError, match="unusable model"):
        Library(tmp_path / "none", model=tmp_path / "no-model").caption(REPO / "examples" / "cat.jpg")


def test_model_folder_resolution(tmp_path, monkeypatch, tiny_model_dir):
    from imgtxt import paths

    monkeypatch.delenv("IMGTXT_MODEL", raising=False)
    assert paths.model_dir() == paths.default_model_dir()
    assert (paths.default_model_dir() / "model.json").is_file()            # inside the package
    assert paths.default_model_dir() == REPO / "weights" / "default"  # this checkout's package
    monkeypatch.setenv("IMGTXT_MODEL", str(tiny_model_dir))
    assert paths.model_dir() == tiny_model_dir
    assert paths.model_dir(tmp_path) == tmp_path                           # --model wins over the env var
    assert Library(tmp_path / "i").model.model_id.startswith("tiny-")


def test_learning_rate_overrides_leave_presets_alone():
    from imgtxt.research.presets import PRESETS, preset, with_learning_rates

    before = [p.lr for p in PRESETS["PH"].phases]
    cfg = with_learning_rates(preset("PH"), lr=1e-5, phase2_lr=3e-6)
    assert [(p.loss, p.lr) for p in cfg.phases] == [("sum", 1e-5), ("max", 3e-6)]
    assert [p.lr for p in PRESETS["PH"].phases] == before
    assert [p.lr for p in with_learning_rates(preset("POE"), phase2_lr=1e-6).phases] == [1e-3, 1e-6]
    with pytest.raises(ValueError, match="curriculum"):
        with_learning_rates(preset("MH"), phase2_lr=1e-6)
