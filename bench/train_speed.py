"""Seconds per training epoch on Flickr8k (cached features), FNE vs the one-layer baseline, one vs all captions.

    .venv/bin/python bench/train_speed.py [--data-dir ../shared/data/flickr8k] [--threads 2] [--embed-dim 512]

Runs the real training loop (`imgtxt.research.train.train`, MH loss, batch 128, the shipped model's sizes) for one epoch
per setting in a temporary folder and prints the loop's own train_seconds (validation excluded). An epoch is
6,000 pairs with one random caption per image, 30,000 with all five; per batch both cost the same, so "all" is
5x the work of "one" per epoch. Run `imgtxt features flickr8k --data-dir DIR` first so the CNN features are cached.
"""
import argparse
import json
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--embed-dim", type=int, default=512)
    args = ap.parse_args()

    import torch

    from imgtxt.research.pipeline import FeatureSettings, build_training_data
    from imgtxt.research.train import preset, train

    torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, embed {args.embed_dim}, word 300, batch 128, MH loss")
    for kind in ("fne", "baseline"):
        data = build_training_data("flickr8k", args.data_dir, kind, FeatureSettings(), quiet=True)
        for captions in ("one", "all"):
            cfg = preset("MH", embed_dim=args.embed_dim, word_dim=300, image_dropout=0.5, max_epochs=1,
                         captions_per_image=captions)
            with tempfile.TemporaryDirectory() as tmp:
                train(tmp, data, cfg)
                record = json.loads((Path(tmp) / "log.jsonl").read_text().splitlines()[-1])
            pairs = len(data.train_features) * (1 if captions == "one" else 5)
            print(f"  {kind:<8} ({data.train_features.shape[1]:>5} features) captions {captions}: "
                  f"{record['train_seconds']:6.1f} s/epoch ({pairs} pairs, {pairs / record['train_seconds']:.0f} pairs/s)")


if __name__ == "__main__":
    main()
