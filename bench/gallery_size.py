"""How much of a sentence query's recall a larger gallery takes, by what the added photos are: more photos of the
same kind (Flickr8k train photos) or photos of another kind (the object dev set's). It separates the two causes
of "captions find their photo less often in a mixed library": the gallery's size, which any added photo causes,
and the other kind's photos taking the places, which the score's corrections decide.

    python bench/gallery_size.py --data-dir ../shared/data/flickr8k [--model DIR] [--added 20,1171,5000] [--json]
        [--other-photos DIR]

Queries: Flickr8k val's 5,000 captions (each right for its own photo alone, as in bench/mixed_library.py) and
its 150 phrases ("a black dog", right for every photo with a caption that contains it; an added Flickr8k train
photo whose captions contain it counts as right too). Galleries: the 1,000 val photos alone; with the object dev
set's 20 photos (bench/mixed_library.py's gallery); with N Flickr8k train photos (the first N in the dataset's
order). Every score is the one `imgtxt search` gives (photos as an index stores them, the query gate on).
Caveats, both printed: the train photos were trained on, so the model knows them well; and their own captions
are in the caption bank that the hubness term measures photos against (every 4th), which pushes them down.

--other-photos DIR: also a gallery with DIR's photos (scenes from another collection, never trained on; e.g. COCO
training photos) beside one with as many Flickr8k train photos. Nothing labels them, so they count as wrong for
every query, phrases included (a phrase may truly fit one: its row is a lower bound). Each such gallery also
reports its intrusions: the share of caption queries whose 10 best photos hold one of the added photos.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_library  # noqa: E402  (the object dev set's photos)


def recall(ranks: np.ndarray) -> list[float]:
    return [round(100 * float(np.mean(ranks <= k)), 1) for k in (1, 5, 10)]


def ranks(scores: np.ndarray, right: list) -> np.ndarray:
    """1-based rank of each row's best right column; a wrong column tied with it counts against it."""
    from imgtxt.research.metrics import pessimistic_rank

    return np.array([pessimistic_rank(s, list(r)) for s, r in zip(scores, right)])


def intrusions(scores: np.ndarray, first_added: int, k: int = 10) -> float:
    """Percent of the rows (queries) whose k best columns (photos) hold one at or past `first_added`."""
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if scores.shape[1] > k else np.arange(scores.shape[1])[None]
    return round(100 * float(np.mean((top >= first_added).any(axis=1))), 1)


def phrase_photos(phrase: str, captions: list[str]) -> set[int]:
    """Photos (caption index // 5) with a caption containing the phrase, as caption_phrases matches it."""
    needle = " " + phrase + " "
    return {i // 5 for i, c in enumerate(captions)
            if needle in " " + " ".join(re.findall(r"[a-z']+", c.lower())) + " "}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="Flickr8k (val: the queries; train: the added photos)")
    parser.add_argument("--model", type=Path, help="model folder (default: the shipped model)")
    parser.add_argument("--added", default="20,1171,5000", help="numbers of train photos to add, comma-separated")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-mixed-library")
    parser.add_argument("--other-photos", type=Path, help="a folder of photos of another collection to add")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from imgtxt import paths
    from imgtxt.model import search_tuning
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research import search_confidence_fit as fitting
    from imgtxt.research.calibrate import embed_photos, split_vectors
    from imgtxt.research.datasets import load_split

    others = sorted(p for p in args.other_photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png")) \
        if args.other_photos else []
    if args.other_photos and not others:
        raise SystemExit(f"gallery_size: no .jpg or .png photos in {args.other_photos}")
    added = sorted({int(n) for n in args.added.split(",")} | ({len(others)} if others else set()))
    photos, queries = mixed_library.prepare(args.work, args.data_dir, "gallery_size")
    model = TrainedModel.load(args.model or paths.default_model_dir())
    val = load_split("flickr8k", args.data_dir, "val")
    train = load_split("flickr8k", args.data_dir, "train")
    if added and added[-1] > len(train.image_paths):
        raise SystemExit(f"gallery_size: the train split has {len(train.image_paths)} photos")
    val_photos, _ = split_vectors(model, "flickr8k", args.data_dir, "val", quiet=True)
    train_photos = (embed_photos(model, train.image_paths[:added[-1]], "train photos", quiet=True)
                    if added else np.zeros((0, val_photos.shape[1]), np.float32))
    object_names = sorted({n for _, files, _ in fitting.read_queries(queries) for n in files}
                          - {p.name for p in val.image_paths})
    object_photos = embed_photos(model, [photos / n for n in object_names], "object photos", quiet=True)
    phrases = fitting.caption_phrases(val.captions)
    texts = list(val.captions) + [p for p, _ in phrases]
    queries_vectors = search_tuning.gate_queries(model, model.encode_text(texts))
    n_val, n_cap = len(val_photos), len(val.captions)
    val_scores = queries_vectors @ val_photos.T
    train_scores = queries_vectors @ train_photos.T
    object_scores = queries_vectors @ object_photos.T
    other_scores = queries_vectors @ embed_photos(model, others, "other photos", quiet=True).T if others else None
    caption_right = [frozenset([i // 5]) for i in range(n_cap)]
    train_captions = train.captions[:5 * (added[-1] if added else 0)]
    phrase_right_train = [phrase_photos(p, train_captions) for p, _ in phrases]

    rows = []

    def measure(name: str, extra: np.ndarray, extra_right: list) -> None:
        scores = np.hstack([val_scores, extra])
        cap = ranks(scores[:n_cap], caption_right)
        phr = ranks(scores[n_cap:], [frozenset(r) | frozenset(n_val + j for j in e)
                                     for (_, r), e in zip(phrases, extra_right)])
        rows.append({"gallery": name, "photos": scores.shape[1], "caption": recall(cap), "phrase": recall(phr),
                     "intrusions": intrusions(scores[:n_cap], n_val)})

    measure("val alone", val_scores[:, :0], [set()] * len(phrases))
    measure(f"val + {len(object_names)} object photos", object_scores, [set()] * len(phrases))
    for n in added:
        measure(f"val + {n} Flickr8k train photos", train_scores[:, :n],
                [{j for j in r if j < n} for r in phrase_right_train])
    if others:
        measure(f"val + {len(others)} photos of {args.other_photos.name}", other_scores, [set()] * len(phrases))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'gallery':<44}{'photos':>7}{'caption R@1/5/10':>22}{'phrase R@1/5/10':>22}{'intrusions':>12}")
    for r in rows:
        recalls = "".join(f"{' / '.join(f'{v:.1f}' for v in r[k]):>22}" for k in ("caption", "phrase"))
        print(f"{r['gallery']:<44}{r['photos']:>7}{recalls}{r['intrusions']:>11.1f}%")
    print("(train photos: trained on, and every 4th of their captions is in the hubness bank)")


if __name__ == "__main__":
    main()
