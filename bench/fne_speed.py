"""FNE extraction speed (images/s) for fp32 vs bf16-autocast+channels_last, 1 vs 10 crops, and how much
bf16 changes the discretized features.

    .venv/bin/python bench/fne_speed.py [--images 64] [--backbone efficientnet_lite0] [--layer-set all]

Images: Flickr8k val JPEGs from ../shared when present (decoding is excluded from the timing), else noise.
Agreement: the fraction of FNE entries ({-1,0,1}) that are identical under bf16 and fp32, both standardized
with fp32 statistics of the same images.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--backbone", default="efficientnet_lite0")
    ap.add_argument("--layer-set", default="all")
    args = ap.parse_args()

    import torch

    from imgtxt.model.backbones import load_backbone
    from imgtxt.model.fne import (
        FeatureStats,
        RawFeatureExtractor,
        full_network_embedding,
    )
    from imgtxt.model.images import load_square

    backbone = load_backbone(args.backbone, None if args.backbone.startswith("efficientnet") else "random")
    folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k" / "images"
    paths = sorted(folder.glob("*.jpg"))[: args.images]
    if len(paths) == args.images:
        images = np.stack([load_square(p, backbone.resize_size) for p in paths])
        source = f"{len(paths)} Flickr8k JPEGs"
    else:
        images = np.random.default_rng(0).integers(0, 256, (args.images, backbone.resize_size, backbone.resize_size, 3), dtype=np.uint8)
        source = f"{args.images} noise images"
    print(f"{args.backbone} layer set {args.layer_set}, {source}, torch threads {torch.get_num_threads()}")
    raw = {}
    for precision in ("fp32", "auto"):
        for crops, batch in ((1, 32), (10, 8)):
            ex = RawFeatureExtractor(backbone, args.layer_set, crops, precision=precision)
            ex(images[:batch])  # warm-up (oneDNN picks kernels per shape)
            start = time.perf_counter()
            out = np.concatenate([ex(images[s:s + batch]) for s in range(0, len(images), batch)])
            rate = len(images) / (time.perf_counter() - start)
            raw[precision, crops] = out
            ex.close()
            name = "fp32" if precision == "fp32" else "bf16 autocast + channels_last"
            print(f"  {name:<30} {crops:2d} crop(s): {rate:6.1f} images/s  ({ex.dim} features)")
            if precision == "fp32":
                backbone.net.to(memory_format=torch.contiguous_format)
    for crops in (1, 10):
        stats = FeatureStats.fit(raw["fp32", crops])
        a = full_network_embedding(raw["fp32", crops], stats)
        b = full_network_embedding(raw["auto", crops], stats)
        print(f"  bf16 vs fp32, {crops:2d} crop(s): {100 * np.mean(a == b):.2f}% of FNE entries identical, "
              f"{100 * np.mean(np.abs(a.astype(int) - b) == 2):.3f}% flipped sign")


if __name__ == "__main__":
    main()
