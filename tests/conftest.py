"""Shared fixtures for the photo-library tests: one tiny real model and one CNN per test session."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tiny_model import backbone_facts, build_tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def load_bench(name: str):
    """bench/NAME.py as a module, importable by its neighbours as when it is run (bench/ on the path) and known to
    sys.modules (dataclasses look their module up there)."""
    import importlib.util

    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session", autouse=True)
def private_user_dirs(tmp_path_factory):
    """Defaults of the index, cache and data folders point into the session's tmp: no test reads or writes the
    user's own ~/.cache/imgtxt or ~/.local/share/imgtxt (a test that does not set them would, e.g. OpenVINO's
    compiled-model cache). Tests that need their own folders still set them per test."""
    root = tmp_path_factory.mktemp("user")
    private = {"IMGTXT_CACHE_DIR": root / "cache", "IMGTXT_INDEX_DIR": root / "index",
               "XDG_CACHE_HOME": root / "xdg-cache", "XDG_DATA_HOME": root / "xdg-data"}
    saved = {name: os.environ.get(name) for name in private}
    os.environ.update({name: str(path) for name, path in private.items()})
    yield root
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def facts():
    return backbone_facts()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, facts) -> Path:
    folder = build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", facts)
    try:  # the CNN graph `imgtxt index` runs without torch; exported once per session
        from imgtxt.model.cnn_export import export_for_model
        from imgtxt.model.modelfile import TrainedModel

        export_for_model(TrainedModel.load(folder))
    except ImportError:
        pass  # no onnx/onnxruntime: the tests run the torch path
    return folder


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from imgtxt.model.modelfile import TrainedModel

    return TrainedModel.load(tiny_model_dir)


@pytest.fixture()
def library(tmp_path, monkeypatch, tiny_model_dir):
    """A fresh index folder and caption cache, and a way to run the CLI in-process (CliRunner)."""
    from click.testing import CliRunner

    from imgtxt.cli.main import app

    index_dir, cache_dir = tmp_path / "index", tmp_path / "cache"
    monkeypatch.setenv("IMGTXT_INDEX_DIR", str(index_dir))
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(cache_dir))
    runner = CliRunner()

    class Library:
        index = index_dir
        model = tiny_model_dir
        env = {**os.environ, "IMGTXT_INDEX_DIR": str(index_dir), "IMGTXT_CACHE_DIR": str(cache_dir)}

        def run(self, *args, ok=True):
            """`imgtxt ARGS` in this process; index commands get the tiny model."""
            args = [str(a) for a in args]
            if args[0] == "index" and "--model" not in args:
                args += ["--model", str(tiny_model_dir)]
            result = runner.invoke(app, args, catch_exceptions=False)
            if ok:
                assert result.exit_code == 0, f"imgtxt {args}: exit {result.exit_code}\n{result.stderr}"
            return result

        def subprocess(self, *args, **kwargs):
            return subprocess.run([str(REPO / ".venv" / "bin" / "imgtxt"), *map(str, args)], env=self.env,
                                  capture_output=True, text=True, **kwargs)

    return Library()


@pytest.fixture()
def as_wheel(monkeypatch, tmp_path):
    """imgtxt as installed from its wheel, for the install hints (`imgtxt.errors.install_hint`): no pyproject.toml
    beside the package, and the package metadata declaring this checkout's extras as a built wheel does."""
    import importlib.metadata

    import imgtxt.errors

    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    declared = [f'{req}; extra == "{extra}"' for extra, reqs in extras.items() for req in reqs]
    monkeypatch.setattr(imgtxt.errors, "__file__", str(tmp_path / "site" / "imgtxt" / "errors.py"))
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: declared if name == "imgtxt" else None)


def write_photo(path: Path, seed: int, size=(320, 240), fmt: str | None = None, **save_args) -> Path:
    """A distinct synthetic photo: smooth random colour blobs (JPEG compresses it like a real photo)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize(size, Image.BICUBIC)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format=fmt, **save_args)
    return path


def copy_examples(folder: Path, names=None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for src in sorted(EXAMPLES.glob("*.jpg")):
        if names is None or src.stem in names:
            out.append(Path(shutil.copy2(src, folder / src.name)))
    return out
