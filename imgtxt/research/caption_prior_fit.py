"""Fitting a model's caption prior (imgtxt.model.caption_prior) on Flickr8k val: `imgtxt tune-caption-prior`.

Each val photo is captioned as `imgtxt caption` does, from its split's 5,000 captions plus the bank's class lines
(with the caption hubness and its photo gate). Its first caption counts as right when it is one of the photo's
own five, or a class line whose name's last word ("bridge" of "suspension bridge", plural too) appears in them:
people call a photo's thing by its head noun. Each weight of a small grid is scored by the share of photos with a
right first caption, on the even-numbered photos (the odd-numbered ones are reported beside them, held out).

Val shows Flickr8k's scenes only, so it can say what a weight costs them but not what it gives photos unlike
Flickr8k's (that is looked at by eye, docs/results.md). So val vetoes rather than chooses: the largest weight
that, with every smaller one, keeps the share within TOLERANCE points of no prior. The bias is given, not
fitted: val alone would take every class line down (it prefers Flickr8k sentences), and by eye that strips the
photos of things of the class lines that were their best captions.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from imgtxt.model.caption_bank import file_sha256
from imgtxt.model.caption_prior import class_weights

from .datasets import CAPTIONS_PER_IMAGE, load_split

WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
TOLERANCE = 1.0   # points of the fit photos' share (5 of 500 photos) a weight may cost Flickr8k's scenes


def head_word(class_line: str) -> str:
    """"A photo of a suspension bridge." -> "bridge"."""
    name = re.sub(r"^a photo of an? ", "", class_line.strip().rstrip(".").lower())
    return re.split(r"[ \-]", name)[-1]


def words_of(texts: list[str]) -> set[str]:
    return set(re.findall(r"[a-z']+", " ".join(texts).lower()))


def named_in(head: str, words: set[str]) -> bool:
    """Whether a head word (or its plural) is one of the words (words_of a photo's captions)."""
    return bool({head, head + "s", head + "es"} & words)


def first_right(caption_scores: np.ndarray, class_scores: np.ndarray, class_ok: np.ndarray,
                per_photo: int = CAPTIONS_PER_IMAGE) -> np.ndarray:
    """(N,) whether each photo's first caption is right. caption_scores (N, per_photo * N): the split's captions,
    photo i's own at i*per_photo ..; class_scores (N, C) the class lines; class_ok (N, C) which class lines count
    as right for the photo. A tie goes to the split's caption."""
    n = caption_scores.shape[0]
    best_caption = caption_scores.argmax(axis=1)
    best_class = class_scores.argmax(axis=1)
    class_first = class_scores[np.arange(n), best_class] > caption_scores[np.arange(n), best_caption]
    own = best_caption // per_photo == np.arange(n)
    return np.where(class_first, class_ok[np.arange(n), best_class], own)


def class_lines_of(model, bank: list[str]) -> int:
    """The first bank line of the class lines add-concepts wrote (all classes, in class order), or ValueError."""
    from .concepts_fit import model_class_captions

    lines = model_class_captions(model)
    for first in range(len(bank) - len(lines), -1, -1):
        if bank[first] == lines[0] and bank[first:first + len(lines)] == lines:
            return first
    raise ValueError(f"{model.folder}: the caption bank has no block of the classifier's {len(lines)} class lines "
                     "(imgtxt add-concepts writes them)")


def fit_prior(caption_scores: np.ndarray, class_base: np.ndarray, q: np.ndarray, class_ok: np.ndarray,
              bias: float = 0.0, tolerance: float = TOLERANCE, per_photo: int = CAPTIONS_PER_IMAGE
              ) -> tuple[dict, list[dict]]:
    """caption_scores (N, 5N), class_base (N, C) the class lines' plain scores, q (N, C) the photos' class
    weights, class_ok (N, C). -> (chosen {"weight", "bias"}, the table with fit and held-out shares in %).
    The weight chosen is the largest of WEIGHTS such that it and every smaller one keep the fit photos' share
    within `tolerance` points of no prior: the scenes veto, since only they are measured here."""
    n = caption_scores.shape[0]
    fit, held = np.arange(n) % 2 == 0, np.arange(n) % 2 == 1
    rows = []
    for weight in WEIGHTS:
        right = first_right(caption_scores, class_base + weight * q - bias, class_ok, per_photo)
        rows.append({"weight": weight, "bias": bias, "fit": round(100 * float(right[fit].mean()), 1),
                     "held_out": round(100 * float(right[held].mean()), 1)})
    floor = first_right(caption_scores, class_base, class_ok, per_photo)[fit].mean() * 100 - tolerance
    chosen = 0.0
    for row in rows:
        if row["fit"] < floor - 1e-9:
            break
        chosen = row["weight"]
    return {"weight": chosen, "bias": bias}, rows


def tune_caption_prior(model, dataset: str, data_dir: Path | str, split: str = "val", bias: float = 0.0,
                       quiet: bool = False):
    """-> (the model.json section, the table)."""
    from imgtxt.errors import ModelError

    from .calibrate import split_vectors

    if model.concepts is None or model.similarity_kind != "cosine":
        raise ModelError(f"{model.folder}: the caption prior is for cosine models with a ConSE bridge")
    bank = model.caption_bank()
    first = class_lines_of(model, bank)
    classes = int(model.concepts.config["classes"])
    d, h = model.content_dim, model.config["joint"]["embed_dim"]
    images, _ = split_vectors(model, dataset, data_dir, split, quiet=quiet)
    data = load_split(dataset, data_dir, split, check_images=False)
    captions = np.ascontiguousarray(model.encode_text(data.captions)[:, :d], np.float32)
    class_rows = model.caption_bank_vectors()[first:first + classes]
    hubness = model.caption_hubness(len(bank))
    photos = np.ascontiguousarray(images[:, :d], np.float32)
    gated = photos if hubness is None else hubness.gate_photos(photos)
    caption_scores = gated @ captions.T - (0 if hubness is None else hubness.penalties(captions)[None, :])
    class_base = gated @ class_rows.T - (0 if hubness is None else hubness.bank_penalties()[first:first + classes])
    q = np.stack([class_weights(p[h:d], model.concepts.class_vectors) for p in photos])
    heads = [head_word(line) for line in bank[first:first + classes]]
    own = [data.captions[i * CAPTIONS_PER_IMAGE:(i + 1) * CAPTIONS_PER_IMAGE] for i in range(len(photos))]
    class_ok = np.array([[named_in(head, words) for head in heads] for words in map(words_of, own)])
    chosen, table = fit_prior(caption_scores, class_base, q, class_ok, bias)
    section = {**chosen, "first_line": first, "classes": classes,
               "captions_sha256": file_sha256(Path(model.folder) / "captions.txt"),
               "fitted_on": {"dataset": dataset, "split": split, "photos": len(photos),
                             "fit": "even-numbered photos", "held_out": "odd-numbered photos",
                             "tolerance": TOLERANCE, "table": table}}
    return section, table
