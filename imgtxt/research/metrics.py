"""Retrieval metrics for image-caption ranking (numpy only).

Ranks are 1-based. i2t: for each image, the rank of its best-ranked caption among all captions.
t2i: for each caption, the rank of its image among all images. Med r follows VSE++:
floor(median of 0-based ranks) + 1.

Ties never help: a model that scores everything equal must not look perfect (a collapsed epoch would
be selected as the best). With ties="expected" (default) tied candidates are put in a uniformly random
order: R@K is the exact probability that a right answer lands in the top K, and the rank is its
expectation, so constant scores give chance-level recall. ties="pessimistic" puts every tied wrong
answer first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TIES = ("expected", "pessimistic")


@dataclass
class RankCounts:
    """Per query: wrong answers scoring strictly higher than the best right one, wrong answers tied
    with it, and right answers tied with it (>= 1)."""

    higher: np.ndarray
    tied: np.ndarray
    own_tied: np.ndarray

    def ranks(self, ties: str = "expected") -> np.ndarray:
        if ties == "pessimistic":
            return (self.higher + self.tied + 1).astype(np.float64)
        if ties == "expected":
            # A random order of `tied` wrong and `own_tied` right answers: E[wrong before the first right]
            # = tied / (own_tied + 1).
            return self.higher + 1 + self.tied / (self.own_tied + 1.0)
        raise ValueError(f"ties must be one of {TIES}, not {ties!r}")

    def recall_at(self, k: int, ties: str = "expected") -> float:
        """Percentage of queries with a right answer in the top k."""
        if ties == "pessimistic":
            return 100.0 * float(np.mean(self.ranks(ties) <= k))
        slots = k - self.higher                          # top-k places left for the tied group
        p_miss = np.where(slots > 0, 1.0, 0.0)           # slots <= 0: no chance -> p_hit 0
        t, o = self.tied.astype(np.float64), self.own_tied.astype(np.float64)
        for s in range(k):
            # P(no right answer among the first `slots` of the tied group), built one place at a time.
            take = (s < slots)
            p_miss = np.where(take, p_miss * np.clip(t - s, 0, None) / np.maximum(t + o - s, 1), p_miss)
        p_hit = np.where(slots > 0, 1.0 - p_miss, 0.0)
        return 100.0 * float(np.mean(p_hit))


def _counts(scores: np.ndarray, own_mask: np.ndarray) -> RankCounts:
    """scores (Q, M) with own_mask marking each query's right answers -> RankCounts."""
    best_own = np.where(own_mask, scores, -np.inf).max(axis=1, keepdims=True)
    wrong = ~own_mask
    higher = ((scores > best_own) & wrong).sum(axis=1)
    tied = ((scores == best_own) & wrong).sum(axis=1)
    own_tied = ((scores == best_own) & own_mask).sum(axis=1)
    return RankCounts(higher, tied, own_tied)


def pessimistic_rank(scores: np.ndarray, right: np.ndarray) -> int:
    """1-based rank of the best right answer in one row of scores (`right`: a boolean mask, or the right
    columns), every wrong answer tied with it counted first."""
    mask = np.zeros(len(scores), bool)
    mask[right] = True
    return 1 + int((scores[~mask] >= scores[mask].max()).sum())


def i2t_counts(scores: np.ndarray, captions_per_image: int = 5, chunk: int = 256) -> RankCounts:
    """scores: (N images, K*N captions), higher is better; captions of image i are K*i..K*i+K-1."""
    n, m = scores.shape
    parts = []
    for s in range(0, n, chunk):
        rows = np.arange(s, min(s + chunk, n))
        own = (np.arange(m)[None, :] // captions_per_image) == rows[:, None]
        parts.append(_counts(np.asarray(scores[rows]), own))
    return RankCounts(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("higher", "tied", "own_tied")))


def t2i_counts(scores: np.ndarray, captions_per_image: int = 5) -> RankCounts:
    """scores: (N images, K*N captions); the right image of every caption."""
    n, m = scores.shape
    own = np.arange(n)[None, :] == (np.arange(m) // captions_per_image)[:, None]   # (M, N)
    return _counts(np.asarray(scores).T, own)


def i2t_ranks(scores: np.ndarray, captions_per_image: int = 5, ties: str = "expected") -> np.ndarray:
    return i2t_counts(scores, captions_per_image).ranks(ties)


def t2i_ranks(scores: np.ndarray, captions_per_image: int = 5, ties: str = "expected") -> np.ndarray:
    return t2i_counts(scores, captions_per_image).ranks(ties)


def recall_summary(ranks: np.ndarray | RankCounts, ties: str = "expected") -> dict:
    if not isinstance(ranks, RankCounts):   # plain ranks: no ties to resolve
        r = np.asarray(ranks)
        ranks = RankCounts(r - 1, np.zeros_like(r), np.ones_like(r))
    rank = ranks.ranks(ties)
    return {
        "r1": ranks.recall_at(1, ties),
        "r5": ranks.recall_at(5, ties),
        "r10": ranks.recall_at(10, ties),
        "medr": float(np.floor(np.median(rank - 1)) + 1),
        "meanr": float(np.mean(rank)),
    }


def evaluate_scores(scores: np.ndarray, captions_per_image: int = 5, ties: str = "expected") -> dict:
    i2t = recall_summary(i2t_counts(scores, captions_per_image), ties)
    t2i = recall_summary(t2i_counts(scores, captions_per_image), ties)
    rsum = sum(i2t[k] + t2i[k] for k in ("r1", "r5", "r10"))
    return {"i2t": i2t, "t2i": t2i, "rsum": rsum}


def mean_of_folds(results: list[dict]) -> dict:
    """Average metrics over folds (COCO 1k protocol)."""
    out: dict = {}
    for direction in ("i2t", "t2i"):
        out[direction] = {k: float(np.mean([r[direction][k] for r in results])) for k in results[0][direction]}
    out["rsum"] = float(np.mean([r["rsum"] for r in results]))
    return out
