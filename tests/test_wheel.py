"""The package as a user installs it: build the wheel (and sdist) offline, install the wheel into a fresh venv,
and run `imgtxt index` + `imgtxt search` on examples/ from a folder outside the checkout.

The fresh venv reuses this test venv's third-party packages through a .pth file (no network, no 2 GB of torch
copied); imgtxt itself comes only from the wheel (`--ignore-installed`, and the editable install of the checkout
is not visible because .pth files inside the reused folders are not processed).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, copy_examples

# every file of the packaged model folder (the MiniLM model: tokenizer.json; a GRU model would have vocab.json)
MODEL_FILES = {p.name for p in (REPO / "weights" / "default").iterdir() if p.is_file()}
assert {"model.json", "model.safetensors", "captions.txt"} <= MODEL_FILES


def source_copy(dest: Path) -> Path:
    """The files git tracks (a build must not write build/ or *.egg-info into the checkout)."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        names = [n for n in files.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout to know which files are the source")
    for name in names:
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def run(args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    pytest.importorskip("setuptools", minversion="70.1", reason="building a wheel offline needs setuptools>=70.1")
    root = tmp_path_factory.mktemp("build")
    src = source_copy(root / "src")
    dist = root / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", dist, src])
    run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"], cwd=src)
    return {"wheel": next(dist.glob("imgtxt-*.whl")), "sdist": next(dist.glob("imgtxt-*.tar.gz")), "root": root}


def test_wheel_and_sdist_carry_the_default_model_and_templates(built):
    wheel_names = set(zipfile.ZipFile(built["wheel"]).namelist())
    assert {f"imgtxt/weights/default/{f}" for f in MODEL_FILES} <= wheel_names
    assert "imgtxt/web/templates/search.html" in wheel_names and "imgtxt/cli/main.py" in wheel_names
    assert not any(n.startswith(("tests/", "weights/", "examples/")) for n in wheel_names)
    with tarfile.open(built["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    # the sdist keeps the checkout's layout (weights/ at the top); building a wheel from it maps it into the package
    assert {f"weights/default/{f}" for f in MODEL_FILES} <= names and "imgtxt/web/templates/photo.html" in names


def test_installed_wheel_indexes_and_searches_from_another_folder(built, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    reused = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
    reused.append(sysconfig.get_paths()["purelib"])
    (site / "reuse-test-venv.pth").write_text("\n".join(dict.fromkeys(reused)) + "\n")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", "--no-index", built["wheel"]])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    photos = copy_examples(tmp_path / "photos")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMGTXT_") and k != "PYTHONPATH"}
    env.update(IMGTXT_INDEX_DIR=str(tmp_path / "index"), IMGTXT_CACHE_DIR=str(tmp_path / "cache"))
    where = run([python, "-c", "import imgtxt.paths as p; print(p.__file__); print(p.default_model_dir())"],
                cwd=elsewhere, env=env).stdout.split()
    assert all(w.startswith(str(site)) for w in where), where            # the wheel's copy, not the checkout

    imgtxt = venv / "bin" / "imgtxt"
    assert run([imgtxt, "--version"], cwd=elsewhere, env=env).stdout.strip() == "imgtxt 0.1.0"
    summary = json.loads(run([imgtxt, "index", tmp_path / "photos", "--json", "-q"], cwd=elsewhere, env=env).stdout)
    assert (summary["added"], summary["indexed"]) == (len(photos), len(photos))
    hits = [json.loads(line) for line in
            run([imgtxt, "search", "a", "cat", "on", "a", "blanket", "-n", "3", "--json"], cwd=elsewhere,
                env=env).stdout.splitlines()]
    assert len(hits) == 3 and {h["path"] for h in hits} <= {str(p) for p in photos}
    status = json.loads(run([python, "-m", "imgtxt", "status", "--json"], cwd=elsewhere, env=env).stdout)
    shipped = json.loads((REPO / "weights" / "default" / "model.json").read_text())
    assert status["photos"] == len(photos) and status["model"].startswith(shipped.get("name", "default") + "-")


def shipped_model_is_finished() -> str | None:
    """Why the packaged default model cannot work without torch yet, or None."""
    folder = REPO / "weights" / "default"
    config = json.loads((folder / "model.json").read_text())
    if not (folder / "cnn.onnx").is_file():
        return "the default model carries no cnn.onnx: run `imgtxt package-model weights/default`"
    if "caption_vectors" not in config:
        return "the default model carries no caption vectors: run `imgtxt package-model weights/default`"
    return None


@pytest.mark.heavy
@pytest.mark.skipif(shipped_model_is_finished() is not None, reason=str(shipped_model_is_finished()))
def test_wheel_with_its_declared_dependencies_works_without_torch(built, tmp_path):
    """A fresh venv, the wheel and what it declares (from the package index pip is configured with): no torch,
    and index + search + caption on examples/ from another folder, the caption bank read, not embedded."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python, imgtxt = venv / "bin" / "python", venv / "bin" / "imgtxt"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # a checkout on the path looks installed
    installed = subprocess.run([python, "-m", "pip", "install", "-q", built["wheel"]], capture_output=True, text=True,
                               env=clean)
    if installed.returncode != 0:
        pytest.skip(f"pip could not install the wheel's dependencies (no package index?): "
                    f"{installed.stderr.strip().splitlines()[-1:]}")
    assert run([python, "-c", "import importlib.util as u; print([m for m in ('torch', 'torchvision', 'timm', 'onnx')"
                              " if u.find_spec(m)])"], env=clean).stdout.strip() == "[]"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    photos = copy_examples(tmp_path / "photos")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMGTXT_", "XDG_")) and k != "PYTHONPATH"}
    env.update(IMGTXT_INDEX_DIR=str(tmp_path / "index"), IMGTXT_CACHE_DIR=str(tmp_path / "cache"))
    summary = json.loads(run([imgtxt, "index", tmp_path / "photos", "--json", "-q"], cwd=elsewhere, env=env).stdout)
    assert summary["indexed"] == len(photos)
    hits = [json.loads(line) for line in run([imgtxt, "search", "a", "cat", "-n", "2", "--json"], cwd=elsewhere,
                                             env=env).stdout.splitlines()]
    assert len(hits) == 2
    outside = tmp_path / "not-indexed.jpg"
    shutil.copy2(photos[0], outside)
    captioned = run([imgtxt, "caption", outside, "--json"], cwd=elsewhere, env=env)
    assert len(captioned.stdout.splitlines()) == 5 and "embedding" not in captioned.stderr, captioned.stderr
    assert not (tmp_path / "cache" / "captions").exists()   # the shipped vectors, nothing embedded or cached
