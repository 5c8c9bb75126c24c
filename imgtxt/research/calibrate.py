"""Fitting a model's score calibration on a dataset split (Flickr8k val), and measuring it there.

The scores come from the paths a library uses: photos through the model's own CNN runtime (`embed_images`, as
`imgtxt index` does; rounded to the float16 the index stores), captions through its numpy text encoder, and
`model.scores` between them, so the fit describes the scores a user sees. No torch when the model's CNN graph
exists. The split's vectors are computed once per model and cached (minutes of CNN on a busy CPU).

What is fitted (imgtxt/model/calibration.py applies it):
  - a logistic P(match | score) on each caption's TOP best-scoring photos of the split (the results a user is
    shown: `search -n` is 10 by default), the caption's own photo being the match and the others not, every pair
    weighted alike: the confidence is the chance that a result shown at this score is the caption's own photo;
  - two thresholds on that confidence, from the captions' best score over the gallery *without* their own photo:
    `strong` where at most STRONG_FALSE of them reach it, `possible` where at most POSSIBLE_FALSE do (never above
    `strong`); each threshold lies midway between the last score let through and the first kept out, and equal
    scores are let through or kept out together.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imgtxt.model.calibration import LEVELS, Calibration

from .datasets import CAPTIONS_PER_IMAGE, load_split

TOP = 10                # each caption's top results that the logistic is fitted on
STRONG_FALSE = 0.10     # at most 10% of own-photo-removed captions get a "strong" top result on the split
POSSIBLE_FALSE = 0.50   # ... and at most half a "possible" one (the rest: weak)


def cache_path(model, dataset: str, split) -> Path:
    from imgtxt.paths import cache_dir

    names = "\n".join(p.name for p in split.image_paths) + "\n" + "\n".join(split.captions)
    names += "\n" + json.dumps(model.config.get("search", {}).get("query_gate"), sort_keys=True)  # the queries' gate
    digest = hashlib.sha256(names.encode("utf-8")).hexdigest()[:12]
    return cache_dir() / "calibration" / f"{model.model_id}-{dataset}-{split.name}-{digest}.npz"


def split_vectors(model, dataset: str, data_dir: Path | str, split_name: str = "val", batch_size: int = 32,
                  quiet: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(photo vectors (N, D), caption vectors (5N, D)) of a split, as an index and a search query compute them."""
    from imgtxt.paths import private_dirs, writing

    split = load_split(dataset, data_dir, split_name)
    path = cache_path(model, dataset, split)
    try:
        with np.load(path) as cached:
            return cached["images"], cached["captions"]
    except (OSError, KeyError, ValueError):
        pass
    image_vectors = embed_photos(model, split.image_paths, f"{dataset} {split_name} photos", batch_size, quiet)
    caption_vectors = model.encode_query(split.captions)   # the scores a search shows
    private_dirs(path.parent)
    with writing(path, 0o600) as f:   # a file object: np.savez would add ".npz" to a temporary name
        np.savez(f, images=image_vectors, captions=caption_vectors)
    return image_vectors, caption_vectors


def embed_photos(model, image_paths: list, desc: str, batch_size: int = 32, quiet: bool = False) -> np.ndarray:
    """(N, D) photo vectors as an index stores them: the model's CNN runtime, rounded to float16."""
    from tqdm import tqdm

    from imgtxt.model.images import ImageError, iter_squares

    size = model.image_embedder().resize_size
    images, batch = [], []
    bar = tqdm(total=len(image_paths), unit="photo", desc=desc, disable=quiet or None, file=sys.stderr)
    for image_path, square in iter_squares(image_paths, size):
        if isinstance(square, ImageError):
            raise ImageError(f"{image_path}: {square}")
        batch.append(square)
        if len(batch) == batch_size or len(images) * batch_size + len(batch) == len(image_paths):
            images.append(model.embed_images(np.stack(batch)).astype(np.float32))
            bar.update(len(batch))
            batch = []
    bar.close()
    # The index keeps float16 vectors: score what a search would score.
    return np.concatenate(images).astype(np.float16).astype(np.float32)


# ------------------------------------------------------------------------------------------- the fit

def fit_logistic(scores: np.ndarray, labels: np.ndarray, iterations: int = 100) -> tuple[float, float]:
    """(slope, intercept) of P(label = 1 | score) = 1 / (1 + exp(-(slope * score + intercept))), by Newton's
    method on the log-likelihood (two parameters: no library needed). A tiny ridge keeps it finite when the
    classes separate."""
    x = np.asarray(scores, np.float64)
    y = np.asarray(labels, np.float64)
    if not 0 < y.sum() < len(y):
        raise ValueError("a calibration needs both matching and non-matching pairs")
    design = np.stack([x, np.ones_like(x)], axis=1)
    theta = np.array([0.0, np.log(y.mean() / (1 - y.mean()))])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (p - y) + 1e-6 * theta
        hessian = (design * (p * (1 - p))[:, None]).T @ design + 1e-6 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(theta[0]), float(theta[1])


def top_pairs(scores: np.ndarray, own: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's k best-scoring photos: (scores, 1 where the photo is the query's own) flattened.
    `scores` is (queries, photos); `own[q]` the column of query q's photo."""
    k = min(k, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.take_along_axis(scores, top, axis=1).ravel(), (top == own[:, None]).ravel().astype(np.float64)


def score_above_share(scores: np.ndarray, share: float) -> float:
    """The score threshold that at most `share` of `scores` reach: midway between the last one let through and
    the first one kept out, so the stored threshold is not on top of a measured score. Equal scores are let
    through or kept out together: when the cut would fall inside a run of equal scores, the whole run stays out."""
    ranked = np.sort(np.asarray(scores, np.float64))[::-1]
    allowed = int(np.floor(share * len(ranked) + 1e-9))
    if allowed >= len(ranked):
        return float(ranked[-1])
    while allowed > 0 and ranked[allowed - 1] == ranked[allowed]:
        allowed -= 1
    if allowed == 0:
        return float(ranked[0]) + 1e-6
    return float(ranked[allowed - 1] + ranked[allowed]) / 2


def own_photo_removed(scores: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each query's best score over the gallery without its own photo."""
    masked = np.array(scores, np.float64, copy=True)
    masked[np.arange(len(own)), own] = -np.inf
    return masked.max(axis=1)


def fit(scores: np.ndarray, own: np.ndarray, top: int = TOP, strong_false: float = STRONG_FALSE,
        possible_false: float = POSSIBLE_FALSE) -> Calibration:
    """The calibration from a (queries, photos) score matrix and each query's own photo.

    Logistic P(match | score) on every query's `top` results over the whole gallery (the results a user is shown:
    `-n` is 10 by default), its own photo being the match. Levels: a query whose own photo was removed gets a
    strong top result for at most `strong_false` of queries, a possible-or-better one for at most `possible_false`.
    """
    if not 0 <= strong_false <= possible_false <= 1:
        raise ValueError("the shares must satisfy 0 <= strong <= possible <= 1")
    slope, intercept = fit_logistic(*top_pairs(scores, own, top))
    if slope <= 0:
        raise ValueError(f"the fitted slope is {slope:.3g}: higher scores are not better matches on this split")
    absent = own_photo_removed(scores, own)
    base = Calibration(slope, intercept, 0.5, 0.5)
    strong = base.confidence(score_above_share(absent, strong_false))
    possible = min(strong, base.confidence(score_above_share(absent, possible_false)))
    return Calibration(slope, intercept, strong, possible)


def _auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(a positive outscores a negative), ties counting half (Mann-Whitney)."""
    negative = np.sort(negative)
    wins = np.searchsorted(negative, positive, "left") + np.searchsorted(negative, positive, "right")
    return float(wins.sum() / 2 / len(positive) / len(negative))


def _shares(levels: list[str]) -> dict:
    return {level: round(100.0 * levels.count(level) / max(1, len(levels)), 1) for level in LEVELS}


def measure(calibration: Calibration, scores: np.ndarray, own: np.ndarray) -> dict:
    """What the levels say about each query's top result, with its own photo in the gallery and removed (%)."""
    rows = np.arange(len(own))
    best = scores.argmax(axis=1)
    present, absent = scores[rows, best].astype(np.float64), own_photo_removed(scores, own)
    right = best == own

    def levels(values) -> list[str]:
        return [calibration.level(calibration.confidence(v)) for v in values]

    present_levels, absent_levels = levels(present), levels(absent)
    right_levels = [lv for lv, r in zip(present_levels, right) if r]
    precision = {lv: round(100.0 * float(np.mean([r for l2, r in zip(present_levels, right) if l2 == lv])), 1)
                 if lv in present_levels else None for lv in LEVELS}
    # The alternative: each score against its query's distribution over the gallery (z-score), as a library
    # could normalise; reported so the choice can be rechecked on another model.
    mean, std = scores.mean(axis=1), scores.std(axis=1) + 1e-12
    masked = np.array(scores, np.float64, copy=True)
    masked[rows, own] = np.nan
    absent_mean, absent_std = np.nanmean(masked, axis=1), np.nanstd(masked, axis=1) + 1e-12
    return {
        "queries": int(len(own)), "photos": int(scores.shape[1]),
        "r1": round(100.0 * float(right.mean()), 1),
        "own_photo_present": _shares(present_levels),
        "own_photo_removed": _shares(absent_levels),
        "right_top1": _shares(right_levels),
        "top1_right_by_level": precision,
        "auc_right_vs_removed": {
            "score": round(_auc(present[right], absent), 4),
            "query_z": round(_auc(((present - mean) / std)[right], (absent - absent_mean) / absent_std), 4)},
    }


def held_out(scores: np.ndarray, own: np.ndarray, top: int, strong_false: float, possible_false: float) -> dict:
    """The levels' figures out of sample: fitted on the captions of the even photos, measured on those of the odd
    ones, and the other way round (same gallery), averaged."""
    halves = [np.flatnonzero(own % 2 == parity) for parity in (0, 1)]
    runs = [measure(fit(scores[a], own[a], top, strong_false, possible_false), scores[b], own[b])
            for a, b in (halves, halves[::-1])]
    return {key: {lv: round((runs[0][key][lv] + runs[1][key][lv]) / 2, 1) for lv in LEVELS}
            for key in ("own_photo_present", "own_photo_removed", "right_top1")}


@dataclass
class Fitted:
    calibration: Calibration
    figures: dict
    fitted_on: dict


def calibrate(model, dataset: str, data_dir: Path | str, split: str = "val", top: int = TOP,
              strong_false: float = STRONG_FALSE, possible_false: float = POSSIBLE_FALSE,
              quiet: bool = False) -> Fitted:
    images, captions = split_vectors(model, dataset, data_dir, split, quiet=quiet)
    scores = np.asarray(model.scores(images, captions), np.float32).T   # (captions, photos)
    own = np.arange(len(captions)) // CAPTIONS_PER_IMAGE
    calibration = fit(scores, own, top, strong_false, possible_false)
    fitted_on = {"dataset": dataset, "split": split, "photos": int(len(images)), "captions": int(len(captions)),
                 "pairs": f"each caption's top {top} photos of the split; its own photo is the match",
                 "strong_removed_max": strong_false, "possible_removed_max": possible_false,
                 "model_id": model.model_id}
    figures = measure(calibration, scores, own)
    figures["held_out"] = held_out(scores, own, top, strong_false, possible_false)
    return Fitted(calibration, figures, fitted_on)


def write_calibration(folder: Path | str, fitted: Fitted) -> Path:
    """Store the calibration in model.json ("calibration"), atomically; the weights and the model id stay."""
    import json

    from imgtxt.paths import writing

    path = Path(folder) / "model.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["calibration"] = {**fitted.calibration.as_config(), "fitted_on": fitted.fitted_on,
                             "val": fitted.figures}
    with writing(path) as f:
        f.write((json.dumps(config, indent=2) + "\n").encode("utf-8"))
    return path


def format_figures(fitted: Fitted) -> str:
    c, f = fitted.calibration, fitted.figures
    on = fitted.fitted_on

    def row(name: str, shares: dict) -> str:
        return f"  {name:<34}" + "  ".join(f"{lv} {shares[lv]:5.1f}%" for lv in LEVELS)

    return "\n".join([
        f"calibration on {on['dataset']} {on['split']} ({f['queries']} captions, {f['photos']} photos), "
        f"model {on['model_id']}",
        f"  confidence = 1 / (1 + exp(-({c.slope:.4f} * score {'-' if c.intercept < 0 else '+'} "
        f"{abs(c.intercept):.4f})))",
        f"  strong: confidence >= {c.strong:.4f} (score >= {c.score_at(c.strong):.4f}); possible: >= "
        f"{c.possible:.4f} (score >= {c.score_at(c.possible):.4f}); else weak",
        "top result of each caption:",
        row("own photo in the gallery", f["own_photo_present"]),
        row("own photo removed", f["own_photo_removed"]),
        row(f"right top-1 hits (R@1 {f['r1']:.1f}%)", f["right_top1"]),
        "the same, thresholds fitted on half the captions, measured on the other half (two folds, mean):",
        row("own photo in the gallery", f["held_out"]["own_photo_present"]),
        row("own photo removed", f["held_out"]["own_photo_removed"]),
        row("right top-1 hits", f["held_out"]["right_top1"]),
        "top result is the caption's own photo, by level: " + ", ".join(
            f"{lv} {v:.1f}%" if v is not None else f"{lv} -" for lv, v in f["top1_right_by_level"].items()),
        f"separation of right top-1 hits from own-photo-removed top results (AUC): score "
        f"{f['auc_right_vs_removed']['score']:.4f}, score normalised per query over the gallery "
        f"{f['auc_right_vs_removed']['query_z']:.4f}",
    ])
