"""The Python API and the CLI against wrong arguments: each a one-line ImgtxtError before anything runs, never
a traceback, a walk from "/", a forgotten library or an unbounded read."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import write_photo

from imgtxt import ImgtxtError
from imgtxt.library.photo_library import Library


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


def photo_count(index_dir) -> int:
    with sqlite3.connect(index_dir / "index.db") as conn:
        return conn.execute("SELECT count(*) FROM photos").fetchone()[0]


def test_an_empty_path_never_forgets_the_current_folder(library, tmp_path, monkeypatch):
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    library.run("index", tmp_path / "p", "-q")
    monkeypatch.chdir(tmp_path)                                    # the photos are under the current folder
    result = library.run("forget", "", ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "empty" in result.stderr, result.stderr
    with pytest.raises(ImgtxtError, match="empty"):
        Library(library.index).forget("")
    with pytest.raises(ImgtxtError, match="empty"):
        Library(library.index).forget(" ")
    assert photo_count(library.index) == 1


def test_index_given_one_str_indexes_that_folder(library, tmp_path, monkeypatch):
    from imgtxt.library import indexer

    seen = []
    monkeypatch.setattr(indexer, "run_index", lambda index_dir, roots, *a, **k: seen.append(roots) or indexer.Summary())
    Library(library.index, library.model).index(str(tmp_path / "p"))
    Library(library.index, library.model).index(tmp_path / "q")
    assert seen == [[str(tmp_path / "p")], [str(tmp_path / "q")]]


@pytest.mark.parametrize("method, args, kwargs, message", [
    ("index", (["x"],), {"batch_size": 1_000_000}, "batch_size must be 1 to 1024"),
    ("index", (["x"],), {"batch_size": "32"}, "batch_size must be an integer"),
    ("index", (["x"],), {"workers": 0}, "workers must be 1 to"),
    ("index", ([],), {}, "at least one"),
    ("index", ([""],), {}, "empty"),
    ("index", (42,), {}, "must be a path or a list of paths"),
    ("index", (["x"],), {"exclude": [1]}, "exclude must be a list of str"),
    ("index", (["x"],), {"prune": "yes"}, "prune must be True or False"),
    ("index", (["x"],), {"previews": "no"}, "previews must be True or False"),
    ("search", (b"dog",), {}, "query must be a str"),
    ("search", ("dog",), {"n": "5"}, "n must be an integer"),
    ("search", ("dog",), {"n": 0}, "n must be at least 1"),
    ("search", ("dog",), {"min_score": "0.2"}, "min_score must be a finite number"),
    ("search", ("dog",), {"min_score": float("nan")}, "min_score must be a finite number"),
    ("search", ("dog",), {"min_score": float("inf")}, "min_score must be a finite number"),
    ("search", ("dog",), {"min_score": 10**400}, "min_score must be a finite number"),
    ("search", ("dog",), {"min_score": -10**400}, "min_score must be a finite number"),
    ("similar", (None,), {}, "photo must be a path"),
    ("caption", ("a.jpg",), {"captions": "a dog"}, None),           # one caption: accepted as a list of one
    ("caption", ("a.jpg",), {"captions": [1, 2]}, "captions must be a list of str"),
    ("caption", ("a.jpg",), {"captions": []}, "captions is empty"),
    ("caption", ("a.jpg",), {"captions": ["", "  "]}, "captions is empty"),
    ("caption", ("a.jpg",), {"on_compute": 5}, "on_compute must be a function"),
    ("caption", ("a.jpg",), {"progress": 5}, "progress must be a function"),
    ("prepare_captions", (), {"on_compute": "print"}, "on_compute must be a function"),
    ("prepare_captions", (), {"progress": 5}, "progress must be a function"),
    ("photo", ("7",), {}, "photo_id must be an integer"),
    ("photo", (1 << 64,), {}, "photo_id must be 1 to"),
])
def test_wrong_arguments_are_one_line_errors(library, method, args, kwargs, message):
    lib = Library(library.index, library.model)
    if message is None:
        with pytest.raises(ImgtxtError) as caught:     # past the arguments: fails on the missing photo instead
            getattr(lib, method)(*args, **kwargs)
        assert "must be" not in str(caught.value)
        return
    with pytest.raises(ImgtxtError, match=message) as caught:
        getattr(lib, method)(*args, **kwargs)
    assert one_line(str(caught.value))


def test_library_paths_must_be_paths(tmp_path):
    with pytest.raises(ImgtxtError, match="index_dir must be a path"):
        Library(123)
    with pytest.raises(ImgtxtError, match="model must be a path"):
        Library(tmp_path, model=["m"])


def test_batch_size_is_bounded_on_the_command_line(library, tmp_path):
    result = library.run("index", tmp_path, "--batch-size", "1000000", ok=False)
    assert result.exit_code == 2 and "1000000" in result.stderr


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "huge", "latin-1"])
def test_a_captions_file_is_read_with_a_bound(library, tmp_path, kind):
    photo = write_photo(tmp_path / "a.jpg", seed=1)
    captions = tmp_path / "captions.txt"
    if kind == "dev-zero":
        captions = "/dev/zero"
    elif kind == "fifo":
        os.mkfifo(captions)
    elif kind == "huge":
        with open(captions, "wb") as f:
            f.truncate(65 << 20)                       # sparse: no disk used
    else:
        captions.write_bytes("un caf\xe9 au soleil\n".encode("latin-1"))
    command = [sys.executable, "-m", "imgtxt", "caption", str(photo), "--captions", str(captions),
               "--model", str(library.model)]
    try:
        out = subprocess.run(command, env=library.env, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("caption --captions read without bound")
    assert out.returncode == 1 and one_line(out.stderr), out.stderr
    assert {"dev-zero": "not a regular file", "fifo": "not a regular file", "huge": "MB of captions",
            "latin-1": "must be UTF-8"}[kind] in out.stderr


def test_an_unreachable_ray_cluster_is_one_line_in_seconds(library, tmp_path):
    import time

    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    start = time.monotonic()
    result = library.run("index", tmp_path / "p", "--ray", "127.0.0.1:1", ok=False)
    assert time.monotonic() - start < 30
    assert result.exit_code == 1 and one_line(result.stderr) and "cannot reach Ray" in result.stderr, result.stderr


@pytest.mark.parametrize("address", ["[::1", "host[1]:10001", "a" * 64 + ".example:10001",
                                     "ray://" + "b" * 64 + ":10001", "a..b:10001"])
def test_a_malformed_ray_address_is_one_line(library, tmp_path, address):
    """urlsplit refuses an unclosed "[" and the resolver a host label over 63 characters: both one line."""
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    result = library.run("index", tmp_path / "p", "--ray", address, ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "--ray" in result.stderr, result.stderr
    with pytest.raises(ImgtxtError, match="--ray") as caught:
        Library(library.index, library.model).index(tmp_path / "p", ray_address=address)
    assert one_line(str(caught.value))
    assert not (library.index / "index.db").exists() or photo_count(library.index) == 0


def test_relative_xdg_folders_are_ignored(tmp_path, monkeypatch):
    """The XDG spec: a relative XDG_DATA_HOME or XDG_CACHE_HOME is invalid and ignored, never the current folder."""
    from imgtxt import paths

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("IMGTXT_INDEX_DIR", "IMGTXT_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", "data")
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert paths.index_dir() == tmp_path / "home" / ".local" / "share" / "imgtxt"
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "imgtxt"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))   # an absolute one is used
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert paths.index_dir() == tmp_path / "data" / "imgtxt" and paths.cache_dir() == tmp_path / "cache" / "imgtxt"


@pytest.mark.parametrize("name, value, allowed", [
    ("IMGTXT_CNN_RUNTIME", "openvin0", "torch, openvino, onnxruntime"),
    ("IMGTXT_CNN_RUNTIME", "gpu", "torch, openvino, onnxruntime"),
    ("IMGTXT_CNN_RUNTIME", "onnx\x1b[2J", "torch, openvino, onnxruntime"),
    ("IMGTXT_DEVICE", "cuda", "auto, cpu or gpu"),
])
def test_an_unknown_cnn_runtime_is_one_line(library, tmp_path, monkeypatch, name, value, allowed):
    """A typo must not quietly run another runtime or device: one line naming the values that work."""
    from imgtxt.model import modelfile

    monkeypatch.setattr(modelfile, "_LOADED_CNNS", {})   # the CNN is chosen when it loads: once per process
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    monkeypatch.setenv(name, value)
    result = library.run("index", tmp_path / "p", ok=False)
    assert result.exit_code == 1 and one_line(result.stderr), result.stderr
    assert name in result.stderr and allowed in result.stderr and "\x1b" not in result.stderr


@pytest.mark.parametrize("option, value", [
    ("--sse-kernels", "0"), ("--rcn-capsules", "0"), ("--vocab-size", "0"), ("--margin", "nan"),
    ("--precision", "nope"), ("--lr", "-1"), ("--epochs", "0"), ("--image-dropout", "inf"), ("--crops", "3"),
    ("--text-head", "cnn"), ("--average-best", "0"), ("--threads", "0"), ("--rcn-lambda", "nan"),
    ("--seed", "-1"),   # numpy refused it after the dataset's features: minutes, then a traceback
])
def test_nonsense_training_settings_are_refused_before_any_work(tmp_path, option, value):
    import time

    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "imgtxt", "train", "flickr8k", "--data-dir", str(tmp_path),
                          "--run-dir", str(tmp_path / "run"), option, value], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and option in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert time.monotonic() - started < 60 and not (tmp_path / "run").exists()


NAMED_VALUES = [   # research options that once took free text: a typo ran (or failed) minutes later, or never
    ["train", "--int8", "nope"], ["train", "--int8", "gru.bias_ih"],            # unknown; a vector (a traceback at save)
    ["train", "--text-encoder", "minilm", "--int8", "image_projection,word_embedding"],   # a GRU's, not MiniLM's
    ["train", "--text-encoder", "amecon", "--int8", "image_projection"],          # AMECON stores no int8 tensors
    ["train", "--preset", "XX"], ["train", "--features", "both"], ["train", "--backbone", "alexnet"],
    ["train", "--layer-set", "some"], ["train", "--runtime", "tpu"], ["train", "--captions", "two"],
    ["train", "--similarity", "dot"], ["train", "--negatives", "all"], ["train", "--text-encoder", "lstm"],
    ["train", "--amecon-vectors", "glove"], ["train", "--amecon-hidden", "4096,x"], ["train", "--amecon-hidden", "0"],
    ["train", "--init-from", "/nonexistent"], ["train", "--text-encoder", "minilm", "--text-weights", "/nonexistent"],
    ["train", "--backbone-weights", "/nonexistent"],   # these three started 30-40 min of features first
    ["features", "--splits", "train,nope"], ["features", "--backbone", "alexnet"],
    ["features", "--backbone-weights", "/nonexistent"],
    ["train", "--backbone", "vgg16", "--layer-set", "blocks"], ["features", "--runtime", "openvino", "--precision", "auto"],
    ["eval", "--split", "nope"], ["eval", "--metrics", "x"], ["eval", "--ties", "x"], ["eval", "--runtime", "x"],
    ["tune-search", "--split", "x"], ["backbone-download", "nope"],
]


def test_named_research_options_are_refused_when_the_command_line_is_read(tmp_path):
    from click.testing import CliRunner

    from imgtxt.cli.main import app

    for args in NAMED_VALUES:
        command, option = args[0], args[-2] if args[-2].startswith("--") else "NAME"   # the option refused
        dataset = ["flickr8k", "--data-dir", str(tmp_path)] if command in ("train", "features", "eval") else []
        run_dir = ["--run-dir", str(tmp_path / "run")] if command == "train" else []
        result = CliRunner().invoke(app, [command, *dataset, *run_dir, *args[1:]])
        error = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
        assert result.exit_code == 2 and error.startswith("Error: Invalid value for"), (args, result.output)
        assert option in error and "Traceback" not in result.output, (args, error)
    assert not (tmp_path / "run").exists()


def test_good_research_options_still_pass():
    from imgtxt.cli.options import int8_tensors

    assert int8_tensors(("image_projection", "minilm.encoder.layer.5.output.dense.weight", "text_head.out.weight"),
                        "minilm") == ("image_projection", "minilm.encoder.layer.5.output.dense.weight",
                                      "text_head.out.weight")
    assert int8_tensors(("word_embedding", "gru.weight_hh"), "gru") == ("word_embedding", "gru.weight_hh")
    assert int8_tensors((), "amecon") == ()


def test_the_cli_spells_the_model_layers_lists():
    from imgtxt.cli import options
    from imgtxt.model.backbones import BACKBONES
    from imgtxt.research.pipeline import FEATURE_RUNTIMES

    assert options.BACKBONES == BACKBONES and options.FEATURE_RUNTIMES == FEATURE_RUNTIMES


def test_sizes_the_memory_cannot_hold_end_a_training_run_in_one_line(tmp_path, monkeypatch):
    """Sizes have no upper bound (what fits depends on the machine): running out of memory is one line, exit 2."""
    from types import SimpleNamespace

    import numpy as np
    from click.testing import CliRunner

    from imgtxt.cli.main import app
    from imgtxt.research import pipeline
    from imgtxt.research import train as train_module

    data = SimpleNamespace(text_setup=SimpleNamespace(description="stub"), vocab=None, extra={},
                           train_features=np.zeros((2, 3)))
    monkeypatch.setattr(pipeline, "build_training_data", lambda *args, **kwargs: data)

    def out_of_memory(run_dir, data, cfg, init_from=None):
        raise MemoryError
    monkeypatch.setattr(train_module, "train", out_of_memory)
    (tmp_path / "d").mkdir()
    result = CliRunner().invoke(app, ["train", "flickr8k", "--data-dir", str(tmp_path / "d"), "--embed-dim",
                                      "1000000000", "--run-dir", str(tmp_path / "run")])
    last = result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 2 and "not enough memory" in last and "Traceback" not in result.stderr, result.output
