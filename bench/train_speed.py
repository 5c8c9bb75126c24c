"""Seconds per training epoch on Flickr8k (cached features), FNE vs the one-layer baseline, one vs all captions.

    .venv/bin/python bench/train_speed.py [--data-dir ../shared/data/flickr8k] [--threads 2] [--embed-dim 512]
    .venv/bin/python bench/train_speed.py --thesis [--threads 1]

--thesis: the THESIS recipe (plain SGD, all five captions) with the bigram text models, one epoch each with dense
and with sparse gradients for the text side's lookup table (train(sparse_gradients=...)), side by side.

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
    ap.add_argument("--thesis", action="store_true", help="dense vs sparse gradients, the thesis's bigram models")
    args = ap.parse_args()
    if args.thesis:
        return thesis_sparse(args)

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


def thesis_sparse(args) -> None:
    import torch

    from imgtxt.research.pipeline import FeatureSettings, build_training_data
    from imgtxt.research.train import preset, train

    torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, THESIS recipe, bag of bi-grams (50,000 terms), 30,000 pairs")
    for name, embed, hidden in (("bigram MLP 1000", 1000, 1000), ("shallow, linear 300", 300, 0)):
        data = build_training_data("flickr8k", args.data_dir, "baseline", FeatureSettings(), quiet=True,
                                   text_kind="bow", text_options={"ngrams": "bi", "hidden": hidden})
        seconds = {}
        for sparse in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                train(tmp, data, preset("THESIS", embed_dim=embed, max_epochs=1), sparse_gradients=sparse)
                seconds[sparse] = json.loads((Path(tmp) / "log.jsonl").read_text().splitlines()[-1])["train_seconds"]
        print(f"  {name:<20} dense {seconds[False]:6.1f} s/epoch  sparse {seconds[True]:6.1f} s/epoch  "
              f"dense / sparse {seconds[False] / seconds[True]:.2f}x")


if __name__ == "__main__":
    main()
