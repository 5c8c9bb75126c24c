"""Seconds for a full Flickr8k val evaluation from cached features (numpy text encoder + ranking).

    .venv/bin/python bench/eval_speed.py [--data-dir ../shared/data/flickr8k] [--model weights/default]

Run `imgtxt eval flickr8k --data-dir DIR` once first so the CNN features are cached; this times the rest.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.evaluate import evaluate_model

    model = TrainedModel.load(args.model)
    evaluate_model(model, "flickr8k", args.data_dir, "val", quiet=True)  # make sure features are cached
    times = []
    for _ in range(3):
        start = time.perf_counter()
        result = evaluate_model(model, "flickr8k", args.data_dir, "val", quiet=True)
        times.append(time.perf_counter() - start)
    print(f"full Flickr8k val eval (1000 images, 5000 captions) from cached features: "
          f"median {sorted(times)[1]:.2f} s over 3 runs (rsum {result['rsum']:.1f})")


if __name__ == "__main__":
    main()
