"""Ways of ranking a query's photos from the search score's parts, measured out of sample on the mixed benchmark
(bench/mixed_rerank.py). Today's search score is one dot product: joint cosine + gate x ConSE score + the photo's
hubness term (imgtxt/model/concepts.py, imgtxt/model/search_tuning.py). The alternatives here re-rank each query's
top candidates under that score:

- reciprocal-rank fusion (Cormack, Clarke and Buettcher, "Reciprocal Rank Fusion outperforms Condorcet and
  individual Rank Learning Methods", SIGIR 2009) of today's ranking and the ConSE ranking, the latter weighted by
  how much the query reads like a class name;
- a logistic re-ranker: a few features of (query, photo) within the candidates (the parts, the ConSE score
  standardised over the candidates, their products with the query's name-likeness), fitted so that right photos
  score high, each query kind weighing the same.

Nothing here is used by a search: these are the measured alternatives (docs/results.md, "A mixed library").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ScoreParts:
    """A (queries, photos) split of the search score: score = joint + gate[:, None] * conse + hub[None, :]."""
    joint: np.ndarray       # (Q, P) joint-space cosines
    conse: np.ndarray       # (Q, P) ConSE scores, before the query gate
    hub: np.ndarray         # (P,) the photos' hubness term (0 without one)
    gate: np.ndarray        # (Q,) the query gate's factor
    name_like: np.ndarray   # (Q,) each query's best cosine to the class names (the gate's input)

    @property
    def today(self) -> np.ndarray:
        return self.joint + self.gate[:, None] * self.conse + self.hub[None, :]


def score_parts(model, photo_vectors: np.ndarray, text_vectors: np.ndarray) -> ScoreParts:
    """Split a model's search scores: photo_vectors as an index holds them, text_vectors from model.encode_text
    (without the query gate)."""
    from imgtxt.model import search_tuning

    if model.concepts is None:
        raise ValueError("the model has no ConSE bridge: its score has one part")
    h, c = model.config["joint"]["embed_dim"], model.content_dim
    photos, texts = np.asarray(photo_vectors, np.float32), np.asarray(text_vectors, np.float32)
    sentences = texts[:, h:c]
    gate_config = model.config.get("search", {}).get("query_gate")
    gate = (search_tuning.gate_scale(sentences, model.concepts.class_vectors, gate_config) if gate_config
            else np.ones(len(texts), np.float32))
    hub = photos[:, -1] if model.hubness else np.zeros(len(photos), np.float32)
    return ScoreParts(texts[:, :h] @ photos[:, :h].T, sentences @ photos[:, h:c].T, hub, gate,
                      (sentences @ model.concepts.class_vectors.T).max(axis=1))


def top_candidates(scores: np.ndarray, n: int) -> np.ndarray:
    """(Q, n) each row's n best columns, best first (ties: the lower column first)."""
    n = min(n, scores.shape[1])
    return np.argsort(-scores, axis=1, kind="stable")[:, :n]


def ranks_within(scores: np.ndarray) -> np.ndarray:
    """0-based rank of each entry within its row, highest score first (ties: the earlier entry first)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    out = np.empty_like(order)
    np.put_along_axis(out, order, np.arange(scores.shape[1])[None, :].repeat(len(scores), 0), axis=1)
    return out


def reciprocal_rank_fusion(ranks: list[np.ndarray], weights: list, k: float = 60.0) -> np.ndarray:
    """sum_i weights[i] / (k + 1 + ranks[i]) for 0-based ranks (the paper's 1 / (k + rank), rank from 1); a weight
    may be a (Q, 1) column, one per query."""
    return sum(np.asarray(w, np.float64) / (k + 1.0 + np.asarray(r, np.float64)) for r, w in zip(ranks, weights))


def standardise_rows(x: np.ndarray) -> np.ndarray:
    """Each row minus its mean, over its standard deviation (a constant row gives zeros)."""
    x = np.asarray(x, np.float64)
    sd = x.std(axis=1, keepdims=True)
    return (x - x.mean(axis=1, keepdims=True)) / np.where(sd > 0, sd, 1.0)


FEATURES = ("joint", "name_like*conse", "hub", "z(conse)", "name_like*z(conse)")


def rerank_features(joint: np.ndarray, conse: np.ndarray, hub: np.ndarray, name_like: np.ndarray) -> np.ndarray:
    """(Q, n, 5) the FEATURES of each query's n candidates (joint, conse, hub: (Q, n); name_like: (Q,)); the ConSE
    score is standardised over the query's own candidates, so its scale is the same for every kind of query."""
    m = np.asarray(name_like, np.float64)[:, None].repeat(joint.shape[1], 1)
    z = standardise_rows(conse)
    return np.stack([joint, m * conse, hub, z, m * z], axis=-1).astype(np.float64)


def fit_weighted_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 0.1,
                          iterations: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, mean, scale) of P(y | x) = sigmoid(((x - mean) / scale) @ coefficients + b), maximising the
    w-weighted log-likelihood with an L2 penalty `l2` on the coefficients (Newton; x is (rows, features))."""
    x, y, w = np.asarray(x, np.float64), np.asarray(y, np.float64), np.asarray(w, np.float64)
    if not 0 < (w * y).sum() < w.sum():
        raise ValueError("a re-ranker needs both right and wrong candidates")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    design = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    penalty = np.diag([l2] * x.shape[1] + [0.0])
    theta = np.zeros(design.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (w * (p - y)) + penalty @ theta
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + penalty + 1e-9 * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return theta[:-1], mean, scale


def rerank_scores(features: np.ndarray, coefficients: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(Q, n) the fitted re-ranker's score (the logit without its constant, which orders nothing)."""
    return ((features - mean) / scale) @ coefficients


def kind_weights(kinds: list[str] | np.ndarray, emphasis: dict[str, float] | None = None) -> np.ndarray:
    """One weight per query so that each kind weighs the same in a fit (times emphasis[kind], default 1)."""
    kinds = np.asarray(kinds)
    emphasis = emphasis or {}
    counts = {k: int((kinds == k).sum()) for k in set(kinds.tolist())}
    return np.array([emphasis.get(k, 1.0) / counts[k] for k in kinds])


def folds_of(kinds: list[str], groups: list, n_folds: int = 4, seed: int = 0) -> np.ndarray:
    """A fold for every query: queries of one group (the same right photo) share a fold; the groups of each kind
    are dealt round the folds in a seeded random order, so every fold holds every kind."""
    kinds, fold = np.asarray(kinds), np.zeros(len(kinds), int)
    rng = np.random.RandomState(seed)
    for kind in sorted(set(kinds.tolist())):
        rows = np.flatnonzero(kinds == kind)
        distinct = sorted({groups[r] for r in rows})
        dealt = dict(zip(distinct, rng.permutation(len(distinct)) % n_folds))
        fold[rows] = [dealt[groups[r]] for r in rows]
    return fold
