"""The ranking alternatives measured on the mixed benchmark (imgtxt/research/rank_fusion.py), by hand."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from imgtxt.research import rank_fusion as rf


def test_reciprocal_rank_fusion_by_hand():
    today = np.array([[0, 1, 2]])      # 0-based ranks of three photos
    conse = np.array([[2, 0, 1]])
    fused = rf.reciprocal_rank_fusion([today, conse], [1.0, 0.5], k=1)
    # photo 0: 1/(1+1+0) + 0.5/(1+1+2); photo 1: 1/3 + 0.5/2; photo 2: 1/4 + 0.5/3
    assert fused[0] == pytest.approx([0.625, 1 / 3 + 0.25, 0.25 + 0.5 / 3])
    # a per-query weight column: the second query ignores the ConSE ranking
    two = rf.reciprocal_rank_fusion([np.vstack([today, today]), np.vstack([conse, conse])],
                                    [1.0, np.array([[0.5], [0.0]])], k=1)
    assert two[1] == pytest.approx([0.5, 1 / 3, 0.25])


def test_ranks_within_rows_and_ties():
    assert rf.ranks_within(np.array([[0.2, 0.9, 0.5]])).tolist() == [[2, 0, 1]]
    assert rf.ranks_within(np.array([[1.0, 1.0]])).tolist() == [[0, 1]]
    assert rf.top_candidates(np.array([[0.2, 0.9, 0.5], [3.0, 1.0, 2.0]]), 2).tolist() == [[1, 2], [0, 2]]


def test_standardise_rows():
    z = rf.standardise_rows(np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]]))
    assert z[0] == pytest.approx([-math.sqrt(1.5), 0.0, math.sqrt(1.5)])
    assert z[1].tolist() == [0.0, 0.0, 0.0]


def test_rerank_features_by_hand():
    f = rf.rerank_features(np.array([[0.3, 0.1]]), np.array([[0.2, 0.0]]), np.array([[0.01, -0.02]]),
                           np.array([0.5]))
    assert f.shape == (1, 2, len(rf.FEATURES))
    # joint, name_like * conse, hub, z(conse) over the two candidates, name_like * z(conse)
    assert f[0, 0] == pytest.approx([0.3, 0.1, 0.01, 1.0, 0.5])
    assert f[0, 1] == pytest.approx([0.1, 0.0, -0.02, -1.0, -0.5])


def test_weighted_logistic_matches_the_closed_form():
    # one binary feature: P(right | x=0) = 1/4, P(right | x=1) = 3/4, so the logit moves by 2 ln 3 from x=0 to 1
    x = np.array([[0.0]] * 4 + [[1.0]] * 4)
    y = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    coef, mean, scale = rf.fit_weighted_logistic(x, y, np.ones(8), l2=0.0)
    scores = rf.rerank_scores(np.array([[[0.0], [1.0]]]), coef, mean, scale)
    assert scores[0, 1] - scores[0, 0] == pytest.approx(2 * math.log(3), rel=1e-6)
    # a weight of 2 is the row written twice: P(right | x=0) = 2/5, so the logit moves by ln 3 - ln(2/3)

    def gap(*fitted):
        s = rf.rerank_scores(np.array([[[0.0], [1.0]]]), *fitted)
        return s[0, 1] - s[0, 0]

    w = np.array([2.0, 1, 1, 1, 1, 1, 1, 1])
    twice = (np.vstack([x, x[:1]]), np.append(y, y[0]), np.ones(9))
    assert gap(*rf.fit_weighted_logistic(x, y, w, l2=0.0)) == pytest.approx(math.log(3) - math.log(2 / 3), rel=1e-6)
    assert gap(*rf.fit_weighted_logistic(*twice, l2=0.0)) == pytest.approx(math.log(3) - math.log(2 / 3), rel=1e-6)
    with pytest.raises(ValueError):
        rf.fit_weighted_logistic(x, np.zeros(8), np.ones(8))


def test_kind_weights_and_folds():
    assert rf.kind_weights(["a", "a", "b"]).tolist() == [0.5, 0.5, 1.0]
    assert rf.kind_weights(["a", "a", "b"], {"b": 3.0}).tolist() == [0.5, 0.5, 3.0]
    kinds = ["caption"] * 40 + ["object"] * 8
    groups = [f"c{i // 5}" for i in range(40)] + ["o1", "o1", "o2", "o2", "o3", "o4", "o5", "o6"]
    fold = rf.folds_of(kinds, groups, 4, seed=0)
    for g in set(groups):   # one photo's queries never straddle folds
        assert len({fold[i] for i in range(48) if groups[i] == g}) == 1
    for f in range(4):      # and every fold holds every kind
        assert {kinds[i] for i in range(48) if fold[i] == f} == {"caption", "object"}
    assert (rf.folds_of(kinds, groups, 4, seed=0) == fold).all()


def test_score_parts_add_up_to_the_search_score():
    gate = {"start": 0.5, "span": 0.5, "gain": 2.0}
    model = SimpleNamespace(config={"joint": {"embed_dim": 2}, "search": {"query_gate": gate}}, content_dim=4,
                            hubness={"weight": 0.5}, concepts=SimpleNamespace(class_vectors=np.eye(2, dtype=np.float32)))
    photos = np.array([[0.6, 0.8, 0.5, 0.0, -0.1]], np.float32)   # joint | ConSE part | hubness term
    texts = np.array([[1.0, 0.0, 0.8, 0.6, 1.0]], np.float32)     # joint | sentence vector | 1
    parts = rf.score_parts(model, photos, texts)
    # name-likeness 0.8 -> gate 1 + 2 * (0.8 - 0.5) / 0.5 = 2.2; score 0.6 + 2.2 * 0.4 - 0.1
    assert parts.name_like == pytest.approx([0.8])
    assert parts.gate == pytest.approx([2.2])
    assert (parts.joint[0, 0], parts.conse[0, 0], parts.hub[0]) == pytest.approx((0.6, 0.4, -0.1))
    assert parts.today[0, 0] == pytest.approx(1.38)
    gated = texts.copy()
    gated[:, 2:4] *= 2.2
    assert parts.today == pytest.approx(photos @ gated.T)
