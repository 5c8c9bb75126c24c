"""On a machine with an NVIDIA GPU: does `imgtxt index` run the CNN there, with the CPU's features, and how much
faster is it?

    pip uninstall -y onnxruntime; pip install '.[gpu]'        # onnxruntime-gpu (CUDA provider)
    .venv/bin/python bench/gpu_check.py [--photos 240] [--model DIR] [--photos-dir DIR]

1. features: the same decoded squares through the model's CNN graph on the CPU (OpenVINO, else ONNX Runtime) and
   on the GPU (ONNX Runtime, CUDA): raw features within the tolerance tests/test_cnn_runtime.py uses
   (rtol 1e-3, atol 1e-3), discretized FNE agreement, cosine of the joint vectors;
2. CNN alone, photos/s, CPU vs GPU (batch 32);
3. `imgtxt index` of --photos 12-MP JPEGs (bench/index_speed.py's photos), cold processes, fresh index each:
   IMGTXT_DEVICE=cpu vs the default (the GPU), wall and CPU seconds, --workers = the CPU count (decoding is all
   that is left for the cores);
4. if torchvision has CUDA: nvJPEG decode (torchvision.io.decode_jpeg on the GPU) vs Pillow's draft decode.
Exits non-zero when the GPU is not used or the features differ beyond the tolerance.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from index_speed import REPO, cli, make_photos, subset  # noqa: E402


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def index_run(folder: Path, model: Path, env: dict, workers: int) -> tuple[float, float, str]:
    start, cpu = time.perf_counter(), child_cpu()
    out = subprocess.run(cli(REPO) + [str(folder), "--model", str(model), "--workers", str(workers), "--json"],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"imgtxt index failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - start, child_cpu() - cpu, json.loads(out.stdout)["device"]


def nvjpeg_rate(photos: list[Path]) -> str:
    try:
        import torch
        from torchvision.io import decode_jpeg
    except ImportError:
        return "torchvision not installed"
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    data = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in photos]
    decode_jpeg(data[:2], device="cuda")  # warm-up
    torch.cuda.synchronize()
    start, cpu = time.perf_counter(), time.process_time()
    for s in range(0, len(data), 32):
        images = decode_jpeg(data[s:s + 32], device="cuda")
        torch.nn.functional.interpolate(torch.stack([i[:, :3000, :3000].float() for i in images]), size=256)
    torch.cuda.synchronize()
    return (f"{len(photos) / (time.perf_counter() - start):.1f} photos/s (full 12-MP decode on the GPU, "
            f"{1000 * (time.process_time() - cpu) / len(photos):.1f} ms CPU/photo)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=int, default=240)
    ap.add_argument("--model", default=None)
    ap.add_argument("--photos-dir", default=str(Path(tempfile.gettempdir()) / "imgtxt-bench-12mp"))
    args = ap.parse_args()

    from imgtxt.library.photo_work import Work, decode
    from imgtxt.model.cnn_runtime import (
        cached_graph_path,
        cuda_offered,
        export_to_cache,
        open_extractor,
    )
    from imgtxt.model.fne import full_network_embedding
    from imgtxt.model.modelfile import TrainedModel, default_model_dir

    if not cuda_offered():
        raise SystemExit("ONNX Runtime has no CUDA provider here: pip uninstall -y onnxruntime; pip install '.[gpu]'")
    model_dir = Path(args.model) if args.model else default_model_dir()
    model = TrainedModel.load(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["IMGTXT_CACHE_DIR"] = str(Path(tmp) / "cache")
        graph = Path(model_dir) / "cnn.onnx"
        if not graph.is_file():
            graph = export_to_cache(model) or cached_graph_path(model.features)
        photos = make_photos(Path(args.photos_dir), args.photos)
        cpu_cnn = open_extractor(graph, None, None, "fp32", device="cpu")
        gpu_cnn = open_extractor(graph, None, None, "fp32", device="gpu")
        print(f"CPU: {cpu_cnn.device_line}; GPU: {gpu_cnn.device_line}")
        squares = np.stack([decode(Work(str(p), 0, 0, None), cpu_cnn.resize_size)[0] for p in photos[:96]])
        rates, raw = {}, {}
        for name, cnn in (("cpu", cpu_cnn), ("gpu", gpu_cnn)):
            cnn.raw_features(squares[:32])
            start = time.perf_counter()
            raw[name] = np.concatenate([cnn.raw_features(squares[s:s + 32]) for s in range(0, len(squares), 32)])
            rates[name] = len(squares) / (time.perf_counter() - start)
        diff = np.abs(raw["gpu"] - raw["cpu"])
        close = np.allclose(raw["gpu"], raw["cpu"], rtol=1e-3, atol=1e-3)
        a, b = (full_network_embedding(raw[k], model.stats) for k in ("cpu", "gpu"))
        va, vb = (model.encode_raw_images(raw[k]) for k in ("cpu", "gpu"))
        cosine = np.sum(va * vb, axis=1) / np.linalg.norm(va, axis=1) / np.linalg.norm(vb, axis=1)
        print(f"features GPU vs CPU ({len(squares)} photos): max abs diff {diff.max():.2e}, within rtol/atol 1e-3: "
              f"{close}; discretized FNE {100 * np.mean(a == b):.4f}% identical; joint vectors cosine min "
              f"{cosine.min():.6f}")
        print(f"CNN alone, batch 32: CPU {rates['cpu']:.1f} photos/s, GPU {rates['gpu']:.1f} photos/s "
              f"= {rates['gpu'] / rates['cpu']:.1f}x")

        folder = subset(photos, args.photos, Path(tmp) / "photos")
        for p in photos:
            p.read_bytes()
        workers = os.cpu_count() or 2
        env = {**os.environ, "IMGTXT_INDEX_DIR": str(Path(tmp) / "warm")}
        index_run(subset(photos, 2, Path(tmp) / "warm-photos"), model_dir, env, workers)  # compile caches
        runs = {}
        for name, device in (("cpu", "cpu"), ("gpu", "auto")):
            env = {**os.environ, "IMGTXT_DEVICE": device, "IMGTXT_INDEX_DIR": str(Path(tmp) / f"index-{name}")}
            runs[name] = index_run(folder, model_dir, env, workers)
            wall, cpu, device_line = runs[name]
            print(f"imgtxt index, {args.photos} photos, IMGTXT_DEVICE={device}: {wall:.1f} s "
                  f"({args.photos / wall:.1f} photos/s), {cpu:.1f} CPU s; CNN on {device_line}")
        print(f"GPU vs CPU: {runs['cpu'][0] / runs['gpu'][0]:.2f}x the photos/s; nvJPEG: {nvjpeg_rate(photos[:96])}")
        print(f"machine: {os.cpu_count()} CPU cores; load {os.getloadavg()[0]:.1f}")
    if not close or "GPU" not in runs["gpu"][2]:
        raise SystemExit("FAILED: the GPU was not used or its features differ beyond the tolerance")


if __name__ == "__main__":
    main()
