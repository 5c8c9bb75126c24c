"""Words Flickr8k's captions rarely or never use for what its photos show: does search still find the photos?

    IMGTXT_CACHE_DIR=... .venv/bin/python bench/synonyms.py --data-dir ../shared/data/flickr8k --model A --model B

"Dog photos" are the val images whose own captions say dog/dogs/puppy (a human label); for each query the
1,000 val images are ranked as `imgtxt search` ranks them and we print the precision of the top 10 and the rank
of the first dog photo, per model. "refused" = the model rejects the query (no known word). Markdown table.
"""
from __future__ import annotations

import argparse
import re

QUERIES = ["a dog", "a puppy", "a pooch", "a canine", "a hound", "a doggy playing outside",
           "a young pup fetching a stick", "a man on a bicycle", "a cyclist", "a kid on a bike"]
DOG = re.compile(r"\b(dog|dogs|puppy|puppies)\b")
BIKE = re.compile(r"\b(bike|bikes|bicycle|bicycles|biker|bikers|cyclist|cyclists|bmx)\b")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--precision", default=None, help="feature precision for every model (default: each "
                        "model's own); fp32 reads the cache the MiniLM models were trained on")
    args = parser.parse_args()

    import numpy as np

    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import load_split
    from imgtxt.research.pipeline import FeatureSettings, raw_split_features

    split = load_split("flickr8k", args.data_dir, "val")
    caps = [" ".join(split.captions[5 * i:5 * i + 5]).lower() for i in range(len(split))]
    labels = {"dog": np.array([bool(DOG.search(c)) for c in caps]),
              "bike": np.array([bool(BIKE.search(c)) for c in caps])}
    rows = {q: [] for q in QUERIES}
    names = []
    for folder in args.model:
        model = TrainedModel.load(folder)
        names.append(model.config.get("name", folder))
        f = model.features
        raw, _ = raw_split_features(split, FeatureSettings(f["backbone"], f["layer_set"], f["crops"],
                                                                args.precision or f["precision"]),
                                    quiet=True)
        images = model.encode_raw_images(raw)
        for q in QUERIES:
            truth = labels["bike" if ("bike" in q or "bicycle" in q or "cyclist" in q) else "dog"]
            if model.check_query(q):
                rows[q].append("refused")
                continue
            order = np.argsort(-model.scores(images, model.encode_text([q]))[:, 0], kind="stable")
            hits = truth[order]
            rows[q].append(f"{100 * hits[:10].mean():.0f}% / {int(np.argmax(hits)) + 1}")
    print(f"dog photos in val: {labels['dog'].sum()} of {len(split)}; bike photos: {labels['bike'].sum()}")
    print("| query | " + " | ".join(f"{n}: P@10 / first hit" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for q in QUERIES:
        print(f"| {q} | " + " | ".join(rows[q]) + " |")


if __name__ == "__main__":
    main()
