"""What a cache of vectors is keyed by, and who may write it: an edited copy of a model never shares (or poisons)
the original's caption vectors, weights edited in place with their mtime put back are seen, NaN text vectors are
an error and never cached, and every cache file and folder is private whatever the umask."""
from __future__ import annotations

import json
import os
import shutil
import stat

import numpy as np
import pytest
from conftest import write_photo


def edited_copy(model_dir, tmp_path, edit) -> "os.PathLike":
    copy = tmp_path / "edited"
    shutil.copytree(model_dir, copy)
    config = json.loads((copy / "model.json").read_text())
    edit(config)
    (copy / "model.json").write_text(json.dumps(config))
    return copy


def swap_two_words(copy) -> None:
    vocab = json.loads((copy / "vocab.json").read_text())
    i, j = vocab["words"].index("dog"), vocab["words"].index("cup")
    vocab["words"][i], vocab["words"][j] = vocab["words"][j], vocab["words"][i]
    (copy / "vocab.json").write_text(json.dumps(vocab))


@pytest.mark.parametrize("edit", ["use_abs", "vocabulary"])
def test_an_edited_copy_of_a_model_never_shares_the_originals_caption_cache(tiny_model_dir, tmp_path, monkeypatch,
                                                                            edit):
    from imgtxt.library.query import caption_vectors
    from imgtxt.model.modelfile import TrainedModel

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    if edit == "use_abs":   # a photo setting too: another model id (test_model_id.py)
        copy = edited_copy(tiny_model_dir, tmp_path, lambda c: c["joint"].update(use_abs=True))
    else:                   # the text side alone: same weights, same photo vectors, same id
        copy = edited_copy(tiny_model_dir, tmp_path, lambda c: None)
        swap_two_words(copy)
    original, edited = TrainedModel.load(tiny_model_dir), TrainedModel.load(copy)
    assert (original.model_id == edited.model_id) == (edit == "vocabulary")
    captions = ["a dog running on the beach", "a cup of coffee on a table"]
    first = caption_vectors(original, captions)
    got = caption_vectors(edited, captions)
    np.testing.assert_allclose(got, edited.encode_text(captions), atol=1e-6)
    assert not np.allclose(got, first)
    np.testing.assert_allclose(caption_vectors(original, captions), first)


def test_weights_edited_in_place_with_their_mtime_put_back_are_refused(tiny_model_dir, tmp_path, monkeypatch):
    from imgtxt.errors import ModelError
    from imgtxt.model.modelfile import TrainedModel

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    TrainedModel.load(copy)                               # its digest is remembered by the file's stamp
    weights = copy / "model.safetensors"
    before = weights.stat()
    with open(weights, "r+b") as f:                      # same size, other bytes, in place (same inode)
        f.seek(before.st_size - 64)
        tail = f.read(64)
        f.seek(before.st_size - 64)
        f.write(bytes(255 - b for b in tail))
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))   # touch -r
    assert (weights.stat().st_size, weights.stat().st_mtime_ns, weights.stat().st_ino) == \
        (before.st_size, before.st_mtime_ns, before.st_ino)
    with pytest.raises(ModelError, match="weights differ"):
        TrainedModel.load(copy)


def test_nan_text_vectors_are_an_error_never_an_empty_answer_nor_cached(library, tmp_path, monkeypatch):
    import subprocess
    import sys

    photo = write_photo(tmp_path / "a.jpg", seed=1)
    captions = tmp_path / "captions.txt"
    captions.write_text("a dog\na cat\n")
    setup = ("import numpy as np\nfrom imgtxt.model.modelfile import TrainedModel\n"
             "TrainedModel.encode_text = lambda self, texts, **k: np.full((len(texts), self.vector_dim), np.nan)\n"
             "from imgtxt.cli.main import app\nimport sys\nsys.argv[0] = 'imgtxt'\napp()\n")
    out = subprocess.run([sys.executable, "-c", setup, "caption", str(photo), "--captions", str(captions),
                          "--model", str(library.model)], env=library.env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "no usable vector" in out.stderr, (out.returncode, out.stdout, out.stderr)
    assert "no usable vector" in out.stderr.strip().splitlines()[-1] and "Traceback" not in out.stderr
    from pathlib import Path

    assert not list(Path(library.env["IMGTXT_CACHE_DIR"]).rglob("*.npy"))   # nothing cached


def test_every_cache_file_and_folder_is_private_whatever_the_umask(tiny_model_dir, tmp_path, monkeypatch):
    from imgtxt.library.query import caption_vectors
    from imgtxt.model.modelfile import TrainedModel

    cache = tmp_path / "cache"
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(cache))
    old = os.umask(0)
    try:
        copy = tmp_path / "copy"                           # a new path: its weights digest is cached anew
        shutil.copytree(tiny_model_dir, copy)
        model = TrainedModel.load(copy)
        caption_vectors(model, ["a dog", "a cat"])
    finally:
        os.umask(old)
    made = [cache, *cache.rglob("*")]
    assert len(made) >= 4, made                            # the folder, captions/, a vector file, the digests
    for path in made:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
