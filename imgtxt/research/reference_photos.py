"""The reference photos of the per-query search confidence (imgtxt/model/search_confidence.py): what a query scores
against typical photos sets its baseline.

They are the training split's photos, one in STRIDE, and optionally the photos of another folder. Flickr8k alone
shows mostly people and dogs: a query for a thing it never shows ("a bowl of fruit") finds no reference photo
near it, its baseline is low, and any photo of something like it stands far above, `strong` although the
thing is absent. Photos of many other things (bench/caltech_photos.py: three of each Caltech 101 category) put
such queries on the scale of the others.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .calibrate import embed_photos
from .datasets import load_split

STRIDE = 6      # one training photo in 6 (1,000 of Flickr8k's 6,000)


def photo_files(folder: Path | str) -> list[Path]:
    """The photos directly in `folder` (sorted by name): the files the index would read as photos."""
    from imgtxt.model.images import PHOTO_SUFFIXES

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder of photos")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PHOTO_SUFFIXES)
    if not files:
        raise ValueError(f"{folder}: holds no photos")
    return files


def embedded(model, paths: list[Path], label: str, desc: str, quiet: bool = False, key: str | None = None):
    """(N, D) embed_photos(paths), cached under the model's id, `label` and a digest of `key` (default: the file
    names, enough for a dataset's fixed photos)."""
    from imgtxt.paths import cache_dir, private_dirs, writing

    key = "\n".join(p.name for p in paths) if key is None else key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    cache = cache_dir() / "calibration" / f"{model.model_id}-{label}-{digest}.npy"
    try:
        vectors = np.load(cache)
        if vectors.shape == (len(paths), model.vector_dim):
            return vectors
    except (OSError, ValueError):
        pass
    vectors = embed_photos(model, paths, desc, quiet=quiet)
    private_dirs(cache.parent)
    with writing(cache, 0o600) as f:
        np.save(f, vectors)
    return vectors


def reference_vectors(model, dataset: str, data_dir: Path | str, quiet: bool = False,
                      more: Path | str | None = None) -> np.ndarray:
    """(M, D) the reference photos' search vectors: the training split, one photo in STRIDE, then the photos of
    the folder `more` (each set cached)."""
    paths = load_split(dataset, data_dir, "train").image_paths[::STRIDE]
    vectors = embedded(model, paths, f"{dataset}-reference", f"{dataset} reference photos", quiet)
    if more is None:
        return vectors
    files = photo_files(more)
    # any folder: the same names may hold other photos, so their sizes and times are part of the key
    key = "\n".join(f"{f.name} {f.stat().st_size} {f.stat().st_mtime_ns}" for f in files)
    return np.concatenate([vectors, embedded(model, files, "more-reference", "more reference photos", quiet, key)])


def describe(dataset: str, more: Path | str | None = None) -> str:
    """What the reference photos are, for model.json."""
    text = f"{dataset} train photos, one in {STRIDE}"
    return text if more is None else f"{text}, and {len(photo_files(more))} photos of {Path(more).name}/"
