"""Is storing caption vectors in int8 (or fp16) harmless? Flickr8k val retrieval with the val captions' vectors
kept as computed (fp32) against the same vectors stored the ways `imgtxt package-model` can store them.

    IMGTXT_CACHE_DIR=... python bench/caption_storage.py --data-dir ../shared/data/flickr8k [--model DIR] [--sample N]

The first N val images (default: all 1,000) and their five captions each, embedded by the model as a query
embeds them (the CNN graph, the numpy text encoder). Caption storage: int8 with a float32 scale per row
(caption_bank.write_caption_vectors), or fp16. Prints i2t (caption retrieval) R@1/5/10, t2i, rsum, and the bytes
per caption.
"""
from __future__ import annotations

import argparse

import numpy as np


def stored(vectors: np.ndarray, storage: str) -> np.ndarray:
    from imgtxt.model.modelfile import quantize_rows

    if storage == "int8":
        q, scale = quantize_rows(vectors)
        return q.astype(np.float32) * scale[:, None]
    if storage == "fp16":
        return vectors.astype(np.float16).astype(np.float32)
    return vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--sample", type=int, default=None, help="the first N val images (default: all)")
    args = parser.parse_args()

    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import load_split
    from imgtxt.research.metrics import evaluate_scores

    model = TrainedModel.load(args.model)
    split = load_split("flickr8k", args.data_dir, "val")
    paths = split.image_paths[:args.sample]
    images = np.stack([model.embed_photo(p) for p in paths])
    captions = model.encode_text(split.captions[:5 * len(paths)])
    print(f"{len(images)} val images, {captions.shape[0]} captions x {captions.shape[1]}")
    for storage, size in (("fp32", 4 * captions.shape[1]), ("fp16", 2 * captions.shape[1]),
                          ("int8", captions.shape[1] + 4)):
        result = evaluate_scores(model.scores(images, stored(captions, storage)))
        i2t, t2i = result["i2t"], result["t2i"]
        print(f"{storage:<5} i2t R@1/5/10 {i2t['r1']:5.1f} {i2t['r5']:5.1f} {i2t['r10']:5.1f}   "
              f"t2i {t2i['r1']:5.1f} {t2i['r5']:5.1f} {t2i['r10']:5.1f}   rsum {result['rsum']:6.2f}   "
              f"{size} bytes/caption", flush=True)


if __name__ == "__main__":
    main()
