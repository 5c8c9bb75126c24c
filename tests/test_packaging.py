"""A model finished for shipping (`imgtxt package-model`): its CNN graph and its caption bank's vectors travel
with it, the first `caption` reads them instead of embedding the bank, and a stale or garbled file is refused
in one line and ignored. Also: what a machine without the train extra is told."""
from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest
from conftest import REPO, copy_examples


@pytest.fixture()
def model_copy(tmp_path, tiny_model_dir):
    """A private copy of the tiny model (with its cnn.onnx): these tests write into the folder."""
    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def stored_record(folder) -> dict:
    return json.loads((folder / "model.json").read_text())["caption_vectors"]


def test_package_model_writes_the_graph_and_the_caption_vectors(library, model_copy, tmp_path, tiny_model):
    (model_copy / "cnn.onnx").unlink()
    result = library.run("package-model", model_copy)
    assert (model_copy / "cnn.onnx").is_file() and (model_copy / "captions.safetensors").is_file()
    assert "packaged" in result.stdout and "12 captions x 64, int8" in result.stdout
    record = stored_record(model_copy)
    assert (record["count"], record["dim"], record["storage"]) == (12, 64, "int8")
    assert (model_copy / "captions.safetensors").stat().st_mode & 0o044 == 0o044   # readable once installed
    from imgtxt.model.modelfile import TrainedModel

    packaged = TrainedModel.load(model_copy)
    assert packaged.model_id == tiny_model.model_id   # finishing a model does not make it another model


@pytest.mark.parametrize("storage", ["int8", "fp16"])
def test_caption_reads_the_stored_vectors_and_ranks_as_the_embedded_bank(model_copy, tmp_path, monkeypatch, storage):
    from imgtxt.library.photo_library import Library
    from imgtxt.model.caption_bank import write_caption_vectors
    from imgtxt.model.modelfile import TrainedModel

    model = TrainedModel.load(model_copy)
    exact = model.encode_text(model.caption_bank())
    write_caption_vectors(model_copy, exact, storage)
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    computed = []
    photo = REPO / "examples" / "coffee.jpg"
    lib = Library(tmp_path / "index", model_copy)
    hits = lib.caption(photo, 5, on_compute=computed.append)
    assert computed == [] and lib.notices == []                        # nothing embedded, nothing refused
    assert not (tmp_path / "cache" / "captions").exists()
    vector = TrainedModel.load(model_copy).embed_photo(photo)
    expected = np.argsort(-(exact @ vector), kind="stable")[:5]
    assert [h.text for h in hits] == [model.caption_bank()[i] for i in expected]
    assert [h.score for h in hits] == pytest.approx([float(exact[i] @ vector) for i in expected], abs=0.01)


@pytest.mark.parametrize("damage", ["garbled", "stale", "missing"])
def test_a_stale_or_garbled_vectors_file_is_refused_in_one_line_and_the_bank_embedded(model_copy, tmp_path, monkeypatch,
                                                                                     damage):
    from imgtxt.library.photo_library import Library
    from imgtxt.model.caption_bank import write_caption_vectors
    from imgtxt.model.modelfile import TrainedModel

    write_caption_vectors(model_copy, TrainedModel.load(model_copy).encode_text(
        TrainedModel.load(model_copy).caption_bank()))
    path = model_copy / "captions.safetensors"
    if damage == "garbled":
        data = bytearray(path.read_bytes())
        data[-10] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "stale":
        with open(model_copy / "captions.txt", "a", encoding="utf-8") as f:
            f.write("a new caption about a dog .\n")
    else:
        path.unlink()
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    computed = []
    lib = Library(tmp_path / "index", model_copy)
    hits = lib.caption(REPO / "examples" / "cat.jpg", 3, on_compute=computed.append)
    assert len(hits) == 3 and computed == [len(TrainedModel.load(model_copy).caption_bank())]
    assert len(lib.notices) == 1 and "captions.safetensors" in lib.notices[0] and "\n" not in lib.notices[0]
    assert {"garbled": "damaged", "stale": "stale", "missing": "missing"}[damage] in lib.notices[0]


def test_the_cli_says_the_refusal_once_on_stderr(library, model_copy, tmp_path):
    from imgtxt.model.caption_bank import write_caption_vectors

    write_caption_vectors(model_copy, np.zeros((12, 64), np.float32))
    (model_copy / "captions.safetensors").write_bytes(b"not a safetensors file")
    result = library.run("caption", REPO / "examples" / "cat.jpg", "--model", model_copy, "--json")
    assert result.stderr.count("captions.safetensors") == 1 and "damaged" in result.stderr
    assert len(result.stdout.splitlines()) == 5


def test_caption_progress_prints_periodic_lines_when_piped(monkeypatch):
    from imgtxt.cli import progress

    clock = iter([0.0, 0.0, 10.0, 31.0, 50.0, 55.0, 95.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    with progress.CaptionProgress(every=30, stream=out) as report:
        for done in (1000, 2000, 3000, 4000, 5000, 6000):
            report.progress(done, 6000)
    lines = out.getvalue().splitlines()
    assert lines == ["imgtxt: embedded 3000/6000 captions (50%) in 31 s, about 31 s left",
                     "imgtxt: embedded 6000/6000 captions (100%) in 95 s"], lines


def test_without_the_train_extra_research_commands_say_what_to_install(library, monkeypatch):
    import imgtxt.errors

    real = imgtxt.errors.missing_modules
    monkeypatch.setattr(imgtxt.errors, "missing_modules", lambda *names: [n for n in real(*names)] + ["torch"])
    result = library.run("export-cnn", ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip() == ("imgtxt: `imgtxt export-cnn` needs torch (the train extra): "
                                     "pip install '.[train]' in the imgtxt checkout")


def test_install_hint_of_a_wheel_names_the_extras_packages(monkeypatch, tmp_path):
    import importlib.metadata

    import imgtxt.errors

    monkeypatch.setattr(imgtxt.errors, "__file__", str(tmp_path / "site" / "imgtxt" / "errors.py"))
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: [
        "numpy>=1.24", 'pillow-heif; extra == "heif"', 'torch<=2.14.1,>=2.2; extra == "train"',
        'onnx>=1.15; extra == "train"'])
    assert imgtxt.errors.install_hint("heif") == "pip install 'pillow-heif'"
    assert imgtxt.errors.install_hint("train") == "pip install 'torch<=2.14.1,>=2.2' 'onnx>=1.15'"


@pytest.mark.parametrize("installed, hint", [("checkout", "pip install '.[ray]' in the imgtxt checkout"),
                                             ("wheel", "pip install 'ray>=2.9'")])
def test_ray_without_the_ray_package_says_what_to_install(monkeypatch, request, installed, hint):
    import sys

    from imgtxt.library import ray_index

    monkeypatch.setitem(sys.modules, "ray", None)   # import ray raises ImportError
    if installed == "wheel":
        request.getfixturevalue("as_wheel")
    with pytest.raises(ray_index.ClusterError) as refused:
        ray_index.embed_on_ray(None, [], "local")
    assert str(refused.value) == f"--ray needs the ray package: {hint}"


def test_indexing_without_a_graph_or_torch_says_what_to_do(library, model_copy, tmp_path, monkeypatch):
    import imgtxt.errors
    import imgtxt.model.cnn_runtime
    import imgtxt.model.modelfile

    (model_copy / "cnn.onnx").unlink()
    monkeypatch.setattr(imgtxt.model.cnn_runtime, "export_to_cache", lambda model: None)   # as without torch
    monkeypatch.setattr(imgtxt.errors, "missing_modules", lambda *names: list(names))
    monkeypatch.setattr(imgtxt.model.modelfile, "_LOADED_CNNS", {})
    copy_examples(tmp_path / "p", ["cat"])
    result = library.run("index", tmp_path / "p", "--model", model_copy, "-q", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "carries no CNN graph (cnn.onnx) and torch is not installed" in result.stderr
    assert "imgtxt package-model" in result.stderr and len(result.stderr.strip().splitlines()) == 1
