"""Index + search end to end on a dataset split: does searching with an image's own caption find it?

    .venv/bin/python bench/flickr_search.py --data-dir ../shared/data/flickr8k [--split val] [--model weights/default]

Links the split's images into a temporary folder, runs the real `imgtxt index` code on it, then searches with
every caption through the same path as `imgtxt search` (text encoder, vector search, SQLite) and prints the fraction
of captions whose own image is in the top 1 / 5 / 10. Nothing is written outside the temporary folder.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dataset", default="flickr8k")
    parser.add_argument("--split", default="val")
    parser.add_argument("--model", default=None, help="model folder (default: weights/default)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N images (a quick check)")
    args = parser.parse_args()

    from imgtxt.library.indexer import run_index
    from imgtxt.library.query import Index, QueryError, search
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import load_split

    model = TrainedModel.load(args.model)
    split = load_split(args.dataset, args.data_dir, args.split)
    images = split.image_paths[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        photos = Path(tmp) / "photos"
        photos.mkdir()
        for i, image in enumerate(images):
            os.symlink(Path(image).resolve(), photos / f"{i:05}{Path(image).suffix}")
        t = time.perf_counter()
        summary = run_index(Path(tmp) / "index", [str(photos)], model, progress=sys.stderr.isatty())
        print(f"indexed {summary.indexed} {args.dataset} {args.split} images in {time.perf_counter() - t:.0f} s "
              f"({summary.line()})")
        index = Index(Path(tmp) / "index")
        ranks, unanswerable = [], 0
        t = time.perf_counter()
        for c, caption in enumerate(split.captions[: 5 * len(images)]):
            want = str(photos / f"{c // 5:05}{Path(images[c // 5]).suffix}")
            try:
                hits = [h.value for h in search(index, model, caption, n=10)]
            except QueryError:
                unanswerable += 1
                hits = []
            ranks.append(hits.index(want) + 1 if want in hits else None)
        elapsed = time.perf_counter() - t
    n = len(ranks)
    for k in (1, 5, 10):
        found = sum(1 for r in ranks if r is not None and r <= k)
        print(f"own image in the top {k:>2}: {found}/{n} captions = {found / n:.1%}")
    print(f"({unanswerable} captions without a known word; {n / elapsed:.0f} searches/s in-process; model {model.model_id})")


if __name__ == "__main__":
    main()
