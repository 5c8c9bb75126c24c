"""The evaluation variants of A. I. Baqapuri's 2016 thesis, Deep Learning applied to Image and Text matching (EPFL,
section 6.2), numpy only.

Image annotation (i2t) with one caption per image, the candidate pool being that caption of every image:
  1st  the first of the five captions,  rnd  one random caption per image (seeded),
  avg  each of the five in turn, averaged,  any  all 5N captions at once, a hit if any own caption is in
  the top K (the usual i2t protocol).
Image search (t2i), where each query has one right image: 1st = the first caption of each image as query,
rnd = a random one, avg = every caption (the usual t2i). `any` does not apply.
rPrecision(5): percentage of an image's own captions among its top 5 of all 5N captions (annotation only).
Med r: the K at which R@K avg reaches 50 %, i.e. the median of the avg ranks (VSE++ rounding).
Ties are resolved as in `metrics` (expected / pessimistic).
"""
from __future__ import annotations

import numpy as np

from .metrics import RankCounts, i2t_counts, t2i_counts

KS = (1, 2, 5, 10)


def _recalls(counts: RankCounts, ties: str) -> dict:
    return {k: counts.recall_at(k, ties) for k in KS}


def _avg(dicts: list[dict]) -> dict:
    return {k: float(np.mean([d[k] for d in dicts])) for k in KS}


def _medr(counts: list[RankCounts], ties: str) -> float:
    ranks = np.concatenate([c.ranks(ties) for c in counts])
    return float(np.floor(np.median(ranks - 1)) + 1)


def r_precision(scores: np.ndarray, captions_per_image: int = 5, top: int = 5, seed: int = 0) -> float:
    """Mean percentage of own captions among each image's top `top` captions; ties in random order."""
    n, m = scores.shape
    tie_break = np.random.default_rng(seed).random(m)
    hits = []
    for i in range(n):
        order = np.lexsort((tie_break, -np.asarray(scores[i], dtype=np.float64)))[:top]
        hits.append(np.mean(order // captions_per_image == i))
    return 100.0 * float(np.mean(hits))


def thesis_metrics(scores: np.ndarray, captions_per_image: int = 5, ties: str = "expected", seed: int = 0) -> dict:
    """scores (N images, K*N captions) -> {"i2t": {"1st","rnd","avg","any": {K: R@K}, "rprecision5", "medr"},
    "t2i": {"1st","rnd","avg": {K: R@K}, "medr"}}."""
    scores = np.asarray(scores)
    n = scores.shape[0]
    k = captions_per_image
    pick = np.random.default_rng(seed).integers(0, k, n)
    rnd_cols = np.arange(n) * k + pick
    pools = [np.arange(n) * k + j for j in range(k)]

    i2t_pools = [i2t_counts(scores[:, cols], 1) for cols in pools]
    i2t_rnd = i2t_counts(scores[:, rnd_cols], 1)
    i2t = {"1st": _recalls(i2t_pools[0], ties), "rnd": _recalls(i2t_rnd, ties),
           "avg": _avg([_recalls(c, ties) for c in i2t_pools]),
           "any": _recalls(i2t_counts(scores, k), ties),
           "rprecision5": r_precision(scores, k, 5, seed), "medr": _medr(i2t_pools, ties)}

    t2i_all = t2i_counts(scores, k)
    first, rnd = t2i_counts(scores[:, pools[0]], 1), t2i_counts(scores[:, rnd_cols], 1)
    t2i = {"1st": _recalls(first, ties), "rnd": _recalls(rnd, ties), "avg": _recalls(t2i_all, ties),
           "medr": _medr([t2i_all], ties)}
    return {"i2t": i2t, "t2i": t2i}


def format_thesis(result: dict) -> str:
    lines = ["thesis metrics (R@K for K = 1 2 5 10)"]
    for direction, name in (("i2t", "image annotation"), ("t2i", "image search")):
        m = result[direction]
        lines.append(f"{name}: Med r {m['medr']:.0f}"
                     + (f"  rPrecision(5) {m['rprecision5']:.2f}" if "rprecision5" in m else ""))
        for variant in ("1st", "rnd", "avg", "any"):
            if variant in m:
                lines.append(f"  R@K {variant:<3}_txt " + "  ".join(f"{m[variant][k]:6.2f}" for k in KS))
    return "\n".join(lines)
