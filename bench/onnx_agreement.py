"""Does the torch-free ONNX CNN give the same features as torch? Raw max abs diff, discretized FNE agreement,
and the shipped model's Flickr8k val rsum on ONNX features vs the cached torch fp32 features.

    .venv/bin/python bench/onnx_agreement.py [--data-dir ../shared/data/flickr8k]

Needs the cached torch fp32 val features (`imgtxt features flickr8k --precision fp32`) and torch for the export.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    from imgtxt.model.cnn_export import export_for_model
    from imgtxt.model.cnn_runtime import OnnxFeatureExtractor, available_backends
    from imgtxt.model.fne import full_network_embedding
    from imgtxt.model.images import ImageError, iter_squares
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import CAPTIONS_PER_IMAGE, load_split
    from imgtxt.research.feature_cache import FeatureSpec, cached_features
    from imgtxt.research.metrics import evaluate_scores

    model = TrainedModel.load(args.model)
    f = model.features
    split = load_split("flickr8k", args.data_dir, "val")
    torch_raw = cached_features("flickr8k", split, FeatureSpec(f["backbone_id"], f["layer_set"], f["crops"], "fp32"))
    if torch_raw is None:
        raise SystemExit("no cached fp32 val features: run `imgtxt features flickr8k --precision fp32` first")
    squares = []
    for path, square in iter_squares(split.image_paths, 256):
        if isinstance(square, ImageError):
            raise SystemExit(f"{path}: {square}")
        squares.append(square)
    squares = np.stack(squares)
    torch_raw = np.asarray(torch_raw)
    captions = model.encode_text(split.captions)

    def report(name, raw):
        r = evaluate_scores(model.scores(model.encode_raw_images(raw), captions), CAPTIONS_PER_IMAGE)
        print(f"  {name:<24} rsum {r['rsum']:.2f}  (i2t R@1 {r['i2t']['r1']:.1f}, t2i R@1 {r['t2i']['r1']:.1f})")

    print(f"{len(split)} val images; load {os.getloadavg()[0]:.1f}")
    report("torch fp32 (cached)", torch_raw)
    with tempfile.TemporaryDirectory() as tmp:
        graph = export_for_model(model, Path(tmp) / "cnn.onnx")
        runs = [(b, "fp32") for b in available_backends()] + [("openvino", "bf16")] * ("openvino" in available_backends())
        for backend, precision in runs:
            extractor = OnnxFeatureExtractor(graph, args.threads, backend, precision, compile_cache=False)
            start = time.perf_counter()
            raw = np.concatenate([extractor.raw_features(squares[s:s + 32]) for s in range(0, len(squares), 32)])
            seconds = time.perf_counter() - start
            diff = np.abs(raw - torch_raw)
            a, b = full_network_embedding(torch_raw, model.stats), full_network_embedding(raw, model.stats)
            print(f"{backend} {precision} ({seconds:.0f} s): raw max abs diff {diff.max():.2e} (largest value "
                  f"{np.abs(torch_raw).max():.1f}), mean abs diff {diff.mean():.2e}; discretized FNE "
                  f"{100 * np.mean(a == b):.4f}% identical, {100 * np.mean(np.abs(a.astype(int) - b) == 2):.4f}% "
                  f"flipped sign")
            report(f"{backend} {precision}", raw)


if __name__ == "__main__":
    main()
