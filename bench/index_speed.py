"""Index throughput on generated 12-MP JPEGs: `imgtxt index` end to end vs the bare backbone.

    .venv/bin/python bench/index_speed.py [--photos 64] [--model imgtxt/weights/default]

Prints: photos/s of a cold `imgtxt index` run (process start, torch import, decoding, CNN, SQLite, Annoy),
the steady-state rate without the fixed start-up cost, JPEG decode rate (draft mode, worker threads),
and the bare CNN's images/s on already-decoded input on this machine. Without --model and without
imgtxt/weights/default, a tiny model with the real EfficientNet-Lite0 features is used (same CNN cost).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def pick_model(arg: str | None, workdir: Path, embed_dim: int = 512) -> Path:
    if arg:
        return Path(arg)
    from imgtxt.modelfile import default_model_dir

    if (default_model_dir() / "model.json").is_file():
        return default_model_dir()
    from tiny_model import backbone_facts, build_tiny_model

    print("(no imgtxt/weights/default: using a tiny model with the real EfficientNet-Lite0 features)", file=sys.stderr)
    return build_tiny_model(workdir / "tiny-model", backbone_facts(), embed_dim=embed_dim)


def make_photos(folder: Path, n: int, size=(4000, 3000)) -> list[Path]:
    """Camera-like 12-MP JPEGs: smooth colour fields plus sensor-like noise, quality 90 (~3-5 MB each)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        base = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)
        noise = 6 * rng.standard_normal((size[1], size[0], 3), dtype=np.float32)
        image = Image.fromarray(np.clip(np.asarray(base, np.float32) + noise, 0, 255).astype(np.uint8))
        path = folder / f"IMG_{i:04}.jpg"
        image.save(path, quality=90)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=64)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = pick_model(args.model, tmp)
        t = time.perf_counter()
        paths = make_photos(tmp / "photos", args.photos)
        mb = sum(p.stat().st_size for p in paths) / len(paths) / 1e6
        print(f"generated {len(paths)} 4000x3000 JPEGs ({mb:.1f} MB each) in {time.perf_counter() - t:.0f} s")

        env = {**os.environ, "IMGTXT_INDEX_DIR": str(tmp / "index")}
        cmd = [str(REPO / ".venv" / "bin" / "imgtxt"), "index", str(tmp / "photos"), "--model", str(model), "--quiet"]
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        print(f"imgtxt index end to end: {wall:.1f} s for {len(paths)} photos = {len(paths) / wall:.2f} photos/s "
              f"(cold process, includes torch import and CNN load)")
        print("  command:", " ".join(cmd))

        # The same work in-process, after start-up: the rate a large collection converges to.
        from imgtxt.indexer import run_index
        from imgtxt.modelfile import TrainedModel

        trained = TrainedModel.load(model)
        t = time.perf_counter()
        embedder = trained.image_embedder()
        startup = time.perf_counter() - t
        t = time.perf_counter()
        run_index(tmp / "index2", [str(tmp / "photos")], trained, log=lambda m: None)
        steady = time.perf_counter() - t
        print(f"  steady state (CNN already loaded, in-process): {len(paths) / steady:.2f} photos/s; "
              f"CNN load {startup:.1f} s")

        from imgtxt.images import iter_squares

        t = time.perf_counter()
        for _ in iter_squares(paths, embedder.resize_size, workers=2):
            pass
        decode = time.perf_counter() - t
        print(f"JPEG decode + resize only (draft mode, 2 threads): {len(paths) / decode:.1f} photos/s")

        batch = np.random.default_rng(0).integers(0, 256, (32, embedder.resize_size, embedder.resize_size, 3),
                                                  dtype=np.uint8)
        embedder.embed(batch[:4])  # warm-up
        rates = []
        for _ in range(3):
            t = time.perf_counter()
            embedder.embed(batch)
            rates.append(len(batch) / (time.perf_counter() - t))
        print(f"bare backbone ({trained.features['backbone']}, FNE 'all' layers, {trained.features['precision']} "
              f"precision, batch 32): {statistics.median(rates):.1f} images/s")
        print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f} during the run")


if __name__ == "__main__":
    main()
