"""Flickr8k's training photos plus Caltech 101 photos captioned by their category: a training set with things
Flickr8k never shows, for `imgtxt train flickr8k --data-dir OUT`.

    python bench/caltech_training_set.py --data-dir ../shared/data/flickr8k --caltech 101_ObjectCategories --out OUT

OUT gets dataset_flickr8k.json (Flickr8k's file, val and test untouched, plus one train entry per Caltech photo),
a link to Flickr8k's images and a copy of the chosen Caltech photos. Each Caltech photo gets five captions from
its category's words ("a pizza.", "a photo of a pizza.", ...) and its category as `group`, so that two photos of
one category are never each other's negatives in training.

What the mixed benchmark uses stays out: each category's first photos (gallery and reference, see
bench/caltech_photos.py) are skipped, and with `--categories half` (the default) every other category is left
out altogether, so the benchmark can tell categories seen in training from unseen ones (`seen_categories`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from caltech_photos import CATEGORIES, GALLERY, REFERENCE, CaltechError, folders, photos_of  # noqa: E402

TEMPLATES = ("{}.", "a photo of {}.", "a picture of {}.", "a close-up photo of {}.", "an image of {}.")


def seen_categories(which: str) -> list[str]:
    """The benchmark's category queries whose photos are trained on: all, or every other one in order."""
    queries = list(CATEGORIES)
    if which == "all":
        return queries
    if which == "half":
        return queries[::2]
    raise ValueError(f"categories must be 'all' or 'half', not {which!r}")


def caltech_entries(caltech: Path, out: Path, per_category: int, which: str) -> list[dict]:
    """Copy the chosen photos under out/caltech/<folder>/ and return their dataset entries."""
    by_folder = {p.name: p for p in folders(caltech)}
    entries = []
    for query in seen_categories(which):
        for folder_name in CATEGORIES[query][0]:
            chosen = photos_of(by_folder[folder_name])[GALLERY + REFERENCE:GALLERY + REFERENCE + per_category]
            target = out / "caltech" / folder_name
            target.mkdir(parents=True, exist_ok=True)
            for photo in chosen:
                if not (target / photo.name).exists():
                    shutil.copyfile(photo, target / photo.name)
                entries.append({"filename": photo.name, "filepath": f"caltech/{folder_name}", "split": "train",
                                "group": f"caltech:{query}",
                                "sentences": [{"raw": t.format(query)} for t in TEMPLATES]})
    return entries


def build(data_dir: Path, caltech: Path, out: Path, per_category: int = 16, which: str = "half") -> dict:
    doc = json.loads((data_dir / "dataset_flickr8k.json").read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    added = caltech_entries(caltech, out, per_category, which)
    doc["images"] = doc["images"] + added
    link = out / "images"
    if not link.exists():
        os.symlink((data_dir / "images").resolve(), link)
    (out / "dataset_flickr8k.json").write_text(json.dumps(doc), encoding="utf-8")
    return {"caltech_photos": len(added), "categories": len(seen_categories(which)),
            "flickr8k_train": sum(e["split"] == "train" for e in doc["images"]) - len(added)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True, help="Flickr8k (dataset_flickr8k.json and images/)")
    ap.add_argument("--caltech", type=Path, required=True, help="Caltech 101's 101_ObjectCategories folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-category", type=int, default=16, help="photos per Caltech folder (default 16)")
    ap.add_argument("--categories", choices=("half", "all"), default="half")
    args = ap.parse_args()
    try:
        summary = build(args.data_dir, args.caltech, args.out, args.per_category, args.categories)
    except (CaltechError, OSError, ValueError) as e:   # a missing folder or file, a damaged dataset file
        raise SystemExit(f"caltech_training_set: {e}") from None
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
