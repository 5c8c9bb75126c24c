"""Index-time CNN cost of each image-feature variant, side by side in one run, next to decoding a 12-MP JPEG.

    .venv/bin/python bench/cnn_variants.py [--images 64] [--rounds 3] [--threads 2]

Each variant is the exported feature graph `imgtxt index` runs (OpenVINO, fp32: crops, normalisation,
EfficientNet-Lite, the FNE's per-layer means), exported once into <cache>/cnn/ (reused when there).
Rounds interleave the variants (A B C D, A B C D, ...) so load from other jobs hits them alike; the median
over rounds is reported, as process CPU time per photo (all runtime threads) and wall time per photo.
Decode: 12-MP JPEGs (bench/index_speed.py's generator) to each variant's input square with Pillow's draft
mode, one thread, CPU per photo. "lite0 + lite1" (concatenated features) costs the sum of both graphs.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

VARIANTS = (("lite0, 1 crop", "efficientnet_lite0", 1), ("lite1, 1 crop", "efficientnet_lite1", 1),
            ("lite2, 1 crop", "efficientnet_lite2", 1), ("lite0, 10 crops", "efficientnet_lite0", 10))


def smooth_squares(n: int, size: int, seed: int = 0) -> np.ndarray:
    from PIL import Image

    rng = np.random.default_rng(seed)
    return np.stack([np.asarray(Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
                                .resize((size, size), Image.BICUBIC)) for _ in range(n)])


def decode_cpu_ms(photos: list[Path], size: int) -> float:
    from imgtxt.model.images import load_square

    load_square(photos[0], size)
    start = time.process_time()
    for p in photos:
        load_square(p, size)
    return 1000 * (time.process_time() - start) / len(photos)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--jpegs", type=int, default=6, help="12-MP JPEGs to decode")
    args = ap.parse_args()

    from index_speed import make_photos

    from imgtxt.research.graph_features import GraphFeatureExtractor
    from imgtxt.research.pipeline import FeatureSettings, open_extractor

    graphs = {}
    for name, backbone, crops in VARIANTS:
        torch_ex = open_extractor(FeatureSettings(backbone, "all", crops, "fp32"), device="cpu")
        graphs[name] = GraphFeatureExtractor.from_torch(torch_ex, "openvino", threads=args.threads)
    inputs = {name: smooth_squares(args.images, g.resize_size) for name, g in graphs.items()}
    for name, g in graphs.items():
        g(inputs[name][:args.batch])   # warm-up: first inference allocates and picks kernels
    cpu: dict[str, list[float]] = {n: [] for n in graphs}
    wall: dict[str, list[float]] = {n: [] for n in graphs}
    for _ in range(args.rounds):
        for name, g in graphs.items():
            w, c = time.perf_counter(), time.process_time()
            for s in range(0, args.images, args.batch):
                g(inputs[name][s:s + args.batch])
            cpu[name].append(1000 * (time.process_time() - c) / args.images)
            wall[name].append(1000 * (time.perf_counter() - w) / args.images)

    with tempfile.TemporaryDirectory() as tmp:
        photos = make_photos(Path(tmp) / "photos", args.jpegs, unique=args.jpegs)
        decode = {size: decode_cpu_ms(photos, size) for size in sorted({g.resize_size for g in graphs.values()})}

    base = float(np.median(cpu["lite0, 1 crop"]))
    print(f"OpenVINO fp32, {args.threads} threads, batch {args.batch}, {args.images} images x {args.rounds} rounds "
          f"(medians); decode of a 12-MP JPEG (draft mode, 1 thread): "
          + ", ".join(f"{ms:.1f} ms CPU to {size} px" for size, ms in decode.items()))
    print("| variant | input px | features | CNN ms CPU/photo | wall ms/photo | vs lite0 1 crop | vs decode |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows = [(n, graphs[n].resize_size, graphs[n].dim, float(np.median(cpu[n])), float(np.median(wall[n])))
            for n in graphs]
    l0, l1 = rows[0], rows[1]
    rows.append(("lite0 + lite1 (concatenated)", f"{l0[1]}+{l1[1]}", l0[2] + l1[2], l0[3] + l1[3], l0[4] + l1[4]))
    for name, size, dim, c, w in rows:
        d = decode[size if isinstance(size, int) else l1[1]]   # the concatenation decodes once, to the larger
        print(f"| {name} | {size} | {dim} | {c:.1f} | {w:.1f} | {c / base:.2f}x | {c / d:.2f}x |")


if __name__ == "__main__":
    main()
