"""Image-caption datasets in Karpathy's JSON format (Flickr8k, Flickr30k, COCO).

A dataset directory holds `dataset_<name>.json` and the images. The JSON lists every image with
its `split` ("train", "val", "test", and for COCO "restval", which joins train as in VSE++) and
five or more `sentences`; an image may also name a `group` (images of one group, such as photos of one object
category captioned alike, are never each other's negatives in training). Images are looked up in the folder
the standard distributions use (`Flicker8k_Dataset/`, `flickr30k-images/`, COCO's `filepath` such as `val2014/`) or in `images/`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from imgtxt.errors import ImgtxtError
from imgtxt.paths import DATA_ENV

DATASETS = ("flickr8k", "flickr30k", "coco")
CAPTIONS_PER_IMAGE = 5

# Folders where each distribution keeps its images, tried in order after the JSON's own `filepath`.
_IMAGE_FOLDERS = {
    "flickr8k": ("images", "Flicker8k_Dataset", "Flickr8k_Dataset"),
    "flickr30k": ("images", "flickr30k-images", "flickr30k_images"),
    "coco": ("images", "."),
}


# Where each dataset's two parts come from. Karpathy's split files (dataset_flickr8k.json, dataset_flickr30k.json,
# dataset_coco.json) are all in one zip; the images come from each dataset's own distribution.
_KARPATHY = "caption_datasets.zip, cs.stanford.edu/people/karpathy/deepimagesent"
_IMAGE_SOURCES = {
    "flickr8k": "the images in Flicker8k_Dataset/ (Flickr8k_Dataset.zip, Hodosh et al.'s request form at the "
                "University of Illinois)",
    "flickr30k": "the images in flickr30k-images/ (the Flickr30k request form, shannon.cs.illinois.edu/DenotationGraph)",
    "coco": "the images in train2014/ and val2014/ (train2014.zip and val2014.zip, cocodataset.org/#download)",
}


def what_it_holds(dataset: str) -> str:
    """What a dataset folder must hold and where each part comes from (one sentence, for error messages)."""
    return (f"the folder must hold dataset_{dataset}.json (Karpathy's split, in {_KARPATHY}) and "
            f"{_IMAGE_SOURCES.get(dataset, 'the images')}")


class DatasetError(ImgtxtError):
    """The dataset is missing or malformed; the message says what to fix."""


@dataclass
class Split:
    """One split: image paths in order, and exactly five captions per image, image-major."""

    dataset: str
    name: str
    image_paths: list[Path]
    captions: list[str]  # len == 5 * len(image_paths); captions[5*i:5*i+5] belong to image i
    groups: list[str] | None = None  # per image: its `group`, or "" for an image of its own; None when no image has one

    def __len__(self) -> int:
        return len(self.image_paths)


def _json_path(data_dir: Path, dataset: str) -> Path:
    for candidate in (data_dir / f"dataset_{dataset}.json", data_dir / "dataset.json"):
        if candidate.is_file():
            return candidate
    raise DatasetError(f"{data_dir}: no dataset_{dataset}.json (Karpathy split file); {what_it_holds(dataset)}; "
                       f"pass --data-dir DIR or set {DATA_ENV}")


def _resolve_image(data_dir: Path, dataset: str, entry: dict) -> Path:
    filename = entry["filename"]
    folders = ([entry["filepath"]] if entry.get("filepath") else []) + list(_IMAGE_FOLDERS[dataset])
    for folder in folders:
        path = data_dir / folder / filename
        if path.is_file():
            return path
    return data_dir / folders[0] / filename  # reported as missing by the caller


def load_split(dataset: str, data_dir: Path | str, split: str, check_images: bool = True) -> Split:
    """Load one split. COCO's `test` is the 5k Karpathy test set; `train` includes `restval`."""
    if dataset not in DATASETS:
        raise DatasetError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DatasetError(f"{data_dir}: no such folder; {what_it_holds(dataset)}; pass --data-dir DIR or set "
                           f"{DATA_ENV}")
    path = _json_path(data_dir, dataset)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        entries = doc["images"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DatasetError(f"{path}: not a Karpathy-format dataset file ({e})") from e

    wanted = {"train": ("train", "restval")}.get(split, (split,))
    image_paths: list[Path] = []
    captions: list[str] = []
    groups: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("split") not in wanted:
            continue
        sentences = entry.get("sentences") or []
        if len(sentences) < CAPTIONS_PER_IMAGE or "filename" not in entry:
            raise DatasetError(
                f"{path}: image {entry.get('filename', '?')} has {len(sentences)} captions; "
                f"every image needs at least {CAPTIONS_PER_IMAGE} and a filename"
            )
        image_paths.append(_resolve_image(data_dir, dataset, entry))
        groups.append(str(entry.get("group") or ""))
        # Some COCO images have 6-7 captions; the standard protocol keeps the first five.
        captions.extend(s["raw"] for s in sentences[:CAPTIONS_PER_IMAGE])
    if not image_paths:
        present = sorted({e.get("split") for e in entries if isinstance(e, dict)} - {None})
        raise DatasetError(f"{path}: split {split!r} is empty (splits present: {', '.join(present)})")
    if check_images:
        missing = [p for p in image_paths if not p.is_file()]
        if missing:
            raise DatasetError(f"{len(missing)} of {len(image_paths)} {split} images are missing, e.g. {missing[0]}; "
                               f"{what_it_holds(dataset)}")
    return Split(dataset, split, image_paths, captions, groups if any(groups) else None)


def restval_mask(dataset: str, data_dir: Path | str) -> list[bool]:
    """For each image of `load_split(dataset, data_dir, "train")`, in order: is it from COCO's restval?
    (The 2019 FNE paper trained on COCO train without restval; `--coco-train paper` drops these.)"""
    doc = json.loads(_json_path(Path(data_dir), dataset).read_text(encoding="utf-8"))
    return [e.get("split") == "restval" for e in doc["images"]
            if isinstance(e, dict) and e.get("split") in ("train", "restval")]


def protocol(dataset: str, split: str, n_images: int) -> str:
    """A one-line description of the evaluation protocol printed next to the numbers."""
    text = (
        f"{dataset} {split}: {n_images} images x {CAPTIONS_PER_IMAGE} captions; i2t = rank of the best-ranked "
        f"of an image's captions among all captions, t2i = rank of the image for each caption"
    )
    if dataset == "coco" and split == "test":
        text += "; COCO 1k = mean over five folds of 1,000 images, 5k = all 5,000 images"
    return text
