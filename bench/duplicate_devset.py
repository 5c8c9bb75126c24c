"""Near-duplicate dev set: which cosine between two photos' vectors says "the same shot"?

    python bench/duplicate_devset.py --data-dir ../shared/data/flickr8k [--photos 120] [--model DIR] [--work DIR] [--json]

Takes `--photos` Flickr8k val images (a fixed shuffle of the val split) and writes four copies of each as people
have them: resized to 60% and re-encoded (quality 75), re-encoded at quality 35, centre-cropped to 85%, and a
"burst" neighbour (cropped 90% off-centre, 8% brighter, quality 85). Everything is indexed through
`imgtxt.Library` (the shipped model unless --model) into WORK/index (kept between runs), and every pair of files
is a positive (the same original) or a negative (two originals). For each threshold it prints pair precision
and recall, and the groups `imgtxt duplicates` would form: originals found whole (all 5 files in one group)
and groups that mix originals. Halves: the threshold is chosen on the even-numbered originals (the lowest with
pair precision >= 0.99, and at least 0.10 above the most alike pair of different originals: a library holds
far more pairs than the dev set) and reported on the odd-numbered ones too.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VARIANTS = ("orig", "small", "q35", "crop", "burst")
THRESHOLDS = [round(t, 2) for t in np.arange(0.50, 0.951, 0.01)]


def val_images(data_dir: Path, count: int) -> list[Path]:
    meta = json.loads((data_dir / "dataset_flickr8k.json").read_text())
    names = sorted(i["filename"] for i in meta["images"] if i["split"] == "val")
    random.Random(0).shuffle(names)
    return [data_dir / "images" / n for n in names[:count]]


def write_variants(sources: list[Path], folder: Path) -> None:
    from PIL import Image, ImageEnhance

    folder.mkdir(parents=True, exist_ok=True)
    for k, src in enumerate(sources):
        if (folder / f"{k:04}_burst.jpg").exists():
            continue
        shutil.copy2(src, folder / f"{k:04}_orig.jpg")
        with Image.open(src) as image:
            image = image.convert("RGB")
            w, h = image.size
            image.resize((int(w * 0.6), int(h * 0.6)), Image.LANCZOS).save(folder / f"{k:04}_small.jpg", quality=75)
            image.save(folder / f"{k:04}_q35.jpg", quality=35)
            cw, ch = int(w * 0.85), int(h * 0.85)
            image.crop(((w - cw) // 2, (h - ch) // 2, (w + cw) // 2, (h + ch) // 2)).save(folder / f"{k:04}_crop.jpg",
                                                                                          quality=90)
            bw, bh = int(w * 0.9), int(h * 0.9)
            shifted = image.crop((w - bw, 0, w, bh))
            ImageEnhance.Brightness(shifted).enhance(1.08).save(folder / f"{k:04}_burst.jpg", quality=85)


def vectors_by_file(index_dir: Path, folder: Path, content_dim: int, dim: int) -> tuple[list[str], np.ndarray]:
    from imgtxt.library.store import decode_vectors

    conn = sqlite3.connect(index_dir / "index.db")
    prefix = str(folder.resolve()) + "/"
    rows = conn.execute("SELECT path, embedding FROM photos WHERE substr(path, 1, ?) = ? ORDER BY path",
                        [len(prefix), prefix]).fetchall()
    conn.close()
    vectors = decode_vectors([r[1] for r in rows], dim)[:, :content_dim]
    return [Path(r[0]).name for r in rows], vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def groups_at(cosines: np.ndarray, originals: np.ndarray, threshold: float) -> tuple[int, int]:
    """(originals whose files form one group alone, groups mixing originals) of a single-link grouping."""
    parent = list(range(len(originals)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    rows, cols = np.nonzero(np.triu(cosines >= threshold, 1))
    for i, j in zip(rows.tolist(), cols.tolist()):
        parent[find(j)] = find(i)
    groups: dict[int, set] = {}
    for i, o in enumerate(originals.tolist()):
        groups.setdefault(find(i), set()).add(o)
    mixed = sum(1 for g in groups.values() if len(g) > 1)
    roots_of = {}
    for i, o in enumerate(originals.tolist()):
        roots_of.setdefault(o, set()).add(find(i))
    whole = sum(1 for o, roots in roots_of.items() if len(roots) == 1 and len(groups[next(iter(roots))]) == 1)
    return whole, mixed


def table(names: list[str], vectors: np.ndarray, keep) -> list[dict]:
    originals = np.array([int(n.split("_")[0]) for n in names])
    chosen = np.array([keep(o) for o in originals])
    originals, vectors = originals[chosen], vectors[chosen]
    cosines = vectors @ vectors.T
    upper = np.triu(np.ones_like(cosines, bool), 1)
    same = (originals[:, None] == originals[None, :]) & upper
    other = ~(originals[:, None] == originals[None, :]) & upper
    rows = []
    top_negative = float(cosines[other].max())
    for t in THRESHOLDS:
        hit = cosines >= t
        tp, fp = int((hit & same).sum()), int((hit & other).sum())
        whole, mixed = groups_at(cosines, originals, t)
        rows.append({"threshold": t, "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / int(same.sum()),
                     "false_pairs": fp, "whole": whole, "originals": len(set(originals.tolist())), "mixed": mixed,
                     "negatives": int(other.sum()), "top_negative": top_negative})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--photos", type=int, default=120)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-bench" / "duplicates")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import imgtxt

    folder = args.work / f"photos-{args.photos}"
    write_variants(val_images(args.data_dir, args.photos), folder)
    lib = imgtxt.Library(args.work / "index", model=args.model)
    start = time.perf_counter()
    summary = lib.index([folder])
    print(f"indexed: {summary.line()} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    model = lib.model
    names, vectors = vectors_by_file(args.work / "index", folder, model.content_dim, model.vector_dim)
    halves = {"even": table(names, vectors, lambda o: o % 2 == 0), "odd": table(names, vectors, lambda o: o % 2 == 1)}
    chosen = next((r["threshold"] for r in halves["even"] if r["precision"] >= 0.99
                   and r["threshold"] >= r["top_negative"] + 0.10), THRESHOLDS[-1])
    if args.json:
        print(json.dumps({"model": model.model_id, "photos": args.photos, "chosen": chosen, **halves}))
        return 0
    print(f"model {model.model_id}; {args.photos} originals x {len(VARIANTS)} files; chosen on the even half: {chosen}")
    for name, rows in halves.items():
        print(f"{name} half: {rows[0]['negatives']} negative pairs, the most alike at cosine {rows[0]['top_negative']:.3f}")
    print("threshold | even: precision recall false-pairs whole mixed | odd: precision recall false-pairs whole mixed")
    for even, odd in zip(halves["even"], halves["odd"]):
        print(f"{even['threshold']:.2f} | " + " | ".join(
            f"{r['precision']:.3f} {r['recall']:.3f} {r['false_pairs']:>5} {r['whole']:>3}/{r['originals']} {r['mixed']:>3}"
            for r in (even, odd)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
