"""Does bf16 autocast change what the model retrieves? The shipped model on Flickr8k val, fed FNE features
extracted in fp32 and in bf16 autocast + channels_last.

    .venv/bin/python bench/precision_effect.py [--data-dir ../shared/data/flickr8k] [--model weights/default]

Both feature sets are standardized with the model's own (training-image) statistics and discretized; prints the
fraction of identical FNE entries, the fraction that flipped sign (-1 <-> 1), and val recall/rsum for each.
The fp32 features are cached like any other setting (the cache key includes the precision).
"""
import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--model", default=None)
    args = ap.parse_args()

    from imgtxt.model.fne import full_network_embedding
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import CAPTIONS_PER_IMAGE, load_split
    from imgtxt.research.metrics import evaluate_scores
    from imgtxt.research.pipeline import FeatureSettings, raw_split_features

    model = TrainedModel.load(args.model)
    f = model.features
    if f["kind"] != "fne":
        raise SystemExit("this compares FNE features; the model uses " + f["kind"])
    split = load_split("flickr8k", args.data_dir, "val")
    captions = model.encode_text(split.captions)
    fne = {}
    for precision in ("fp32", "auto"):  # auto = bf16 autocast + channels_last on a CPU with bf16 support
        raw, _ = raw_split_features(split, FeatureSettings(f["backbone"], f["layer_set"], f["crops"], precision))
        fne[precision] = full_network_embedding(raw, model.stats)
        result = evaluate_scores(model.scores(model.encode_raw_images(raw), captions), CAPTIONS_PER_IMAGE)
        i, t = result["i2t"], result["t2i"]
        print(f"{precision:>4}: i2t R@1/5/10 {i['r1']:.1f}/{i['r5']:.1f}/{i['r10']:.1f}  "
              f"t2i {t['r1']:.1f}/{t['r5']:.1f}/{t['r10']:.1f}  rsum {result['rsum']:.1f}")
    a, b = fne["fp32"], fne["auto"]
    print(f"FNE entries identical: {100 * np.mean(a == b):.2f}%, flipped sign: "
          f"{100 * np.mean(np.abs(a.astype(int) - b) == 2):.3f}% ({a.shape[0]} images x {a.shape[1]} features; "
          f"model trained on {f['precision']} features)")


if __name__ == "__main__":
    main()
