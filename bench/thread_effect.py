"""Is evaluation reproducible across thread counts? fp32 FNE features of Flickr8k val images computed with 1 and
with 2 torch threads (discretized agreement), and `imgtxt eval` on the cached features at 1 and 2 threads.

    IMGTXT_CACHE_DIR=... .venv/bin/python bench/thread_effect.py --data-dir ../shared/data/flickr8k [--images 200]

The eval runs are subprocesses with OMP/MKL/OPENBLAS_NUM_THREADS set, as a user's machine would differ.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--images", type=int, default=200)
    args = parser.parse_args()

    import numpy as np
    import torch

    from imgtxt.model.fne import full_network_embedding
    from imgtxt.model.images import load_square
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import load_split
    from imgtxt.research.pipeline import FeatureSettings, open_extractor

    model = TrainedModel.load(args.model)
    f = model.features
    split = load_split("flickr8k", args.data_dir, "val")
    extractor = open_extractor(FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"]))
    squares = np.stack([load_square(p, extractor.resize_size) for p in split.image_paths[:args.images]])
    fne = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        raw = np.concatenate([extractor(squares[s:s + 32].copy()) for s in range(0, len(squares), 32)])
        fne[threads] = (raw, full_network_embedding(raw, model.stats))
    (r1, a), (r2, b) = fne[1], fne[2]
    print(f"{args.images} val images, {f['precision']} features, 1 vs 2 torch threads: max |raw diff| "
          f"{np.abs(r1 - r2).max():.2e}; FNE entries identical {100 * np.mean(a == b):.4f}%")
    for threads in (1, 2):
        env = {**os.environ, **{k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                            "OPENBLAS_NUM_THREADS")}}
        cmd = [sys.executable, "-c", "from imgtxt.cli.main import app; app()", "eval", "flickr8k", "--data-dir",
               args.data_dir, "--json"] + (["--model", args.model] if args.model else [])
        out = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
        print(f"imgtxt eval (cached features) at {threads} thread(s): rsum {out['rsum']:.4f}  "
              f"i2t {out['i2t']}  t2i {out['t2i']}")


if __name__ == "__main__":
    main()
