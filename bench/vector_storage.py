"""Does storing photo vectors as float16 (or int8) instead of float32 change what a search finds?

    .venv/bin/python bench/vector_storage.py [--model weights/default] [--work DIR]

The shipped model's Flickr8k val photo vectors (from the cached fp32 FNE features) are rounded to each storage
format and decoded back; prints val R@1/5/10 both ways and rsum for each, and how often a caption's top-10 photos
differ from the float32 ranking.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from real_vectors import WORK, caption_vectors, load_model, photo_vectors


def int8_round_trip(x: np.ndarray) -> np.ndarray:
    scale = np.abs(x).max(axis=1, keepdims=True) / 127.0
    return (np.round(x / scale).astype(np.int8) * scale).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--work", type=Path, default=WORK, help=f"working folder, kept between runs for its cached vectors (default: {WORK})")
    args = ap.parse_args()

    from imgtxt.research.metrics import evaluate_scores

    model = load_model(args.model)
    images, captions = photo_vectors(model, args.work, "val"), caption_vectors(model, args.work, "val")
    print(f"model {model.model_id}: {len(images)} val photos, {len(captions)} captions")
    reference = model.scores(images, captions)
    top_ref = np.argsort(-reference, axis=0)[:10].T
    for name, stored in (("float32", images), ("float16", images.astype(np.float16).astype(np.float32)),
                         ("int8", int8_round_trip(images))):
        scores = model.scores(stored, captions)
        r = evaluate_scores(scores, 5)
        top = np.argsort(-scores, axis=0)[:10].T
        same = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, top_ref)])
        i, t = r["i2t"], r["t2i"]
        print(f"{name:>8}: i2t R@1/5/10 {i['r1']:.1f}/{i['r5']:.1f}/{i['r10']:.1f}  t2i {t['r1']:.1f}/{t['r5']:.1f}/"
              f"{t['r10']:.1f}  rsum {r['rsum']:.2f}  top-10 photos shared with float32: {100 * same:.2f}%  "
              f"max |score diff| {np.abs(scores - reference).max():.2e}")


if __name__ == "__main__":
    main()
