"""Retrieval metrics for image-caption ranking (numpy only).

Ranks are 1-based. i2t: for each image, the rank of its best-ranked caption among all captions.
t2i: for each caption, the rank of its image among all images. Med r follows VSE++:
floor(median of 0-based ranks) + 1.
"""
from __future__ import annotations

import numpy as np


def i2t_ranks(scores: np.ndarray, captions_per_image: int = 5) -> np.ndarray:
    """scores: (N images, K*N captions), higher is better; captions of image i are K*i..K*i+K-1."""
    n_images = scores.shape[0]
    ranks = np.empty(n_images, dtype=np.int64)
    for i in range(n_images):
        row = scores[i]
        own = row[captions_per_image * i: captions_per_image * (i + 1)]
        # Rank of the best own caption = how many captions score strictly higher, plus one.
        ranks[i] = int((row > own.max()).sum()) + 1
    return ranks


def t2i_ranks(scores: np.ndarray, captions_per_image: int = 5) -> np.ndarray:
    """scores: (N images, K*N captions); returns the rank of the right image for every caption."""
    n_captions = scores.shape[1]
    owner = np.arange(n_captions) // captions_per_image
    own = scores[owner, np.arange(n_captions)]
    return (scores > own[None, :]).sum(axis=0).astype(np.int64) + 1


def recall_summary(ranks: np.ndarray) -> dict:
    zero_based = ranks - 1
    return {
        "r1": 100.0 * float(np.mean(ranks <= 1)),
        "r5": 100.0 * float(np.mean(ranks <= 5)),
        "r10": 100.0 * float(np.mean(ranks <= 10)),
        "medr": float(np.floor(np.median(zero_based)) + 1),
        "meanr": float(np.mean(ranks)),
    }


def evaluate_scores(scores: np.ndarray, captions_per_image: int = 5) -> dict:
    i2t = recall_summary(i2t_ranks(scores, captions_per_image))
    t2i = recall_summary(t2i_ranks(scores, captions_per_image))
    rsum = sum(i2t[k] + t2i[k] for k in ("r1", "r5", "r10"))
    return {"i2t": i2t, "t2i": t2i, "rsum": rsum}


def mean_of_folds(results: list[dict]) -> dict:
    """Average metrics over folds (COCO 1k protocol)."""
    out: dict = {}
    for direction in ("i2t", "t2i"):
        out[direction] = {k: float(np.mean([r[direction][k] for r in results])) for k in results[0][direction]}
    out["rsum"] = float(np.mean([r["rsum"] for r in results]))
    return out
