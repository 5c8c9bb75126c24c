"""Recall@K, Med r and mean r against ranks computed by hand."""
import numpy as np
import pytest

from imgtxt.metrics import evaluate_scores, i2t_ranks, mean_of_folds, recall_summary, t2i_ranks


def test_ranks_by_hand():
    # 2 images, 2 captions each (captions 0,1 -> image 0; 2,3 -> image 1)
    scores = np.array([
        [0.1, 0.7, 0.9, 0.2],   # image 0: best own caption (0.7) is beaten by 0.9 -> rank 2
        [0.5, 0.4, 0.3, 0.6],   # image 1: best own caption 0.6 is the top -> rank 1
    ])
    assert i2t_ranks(scores, captions_per_image=2).tolist() == [2, 1]
    # caption 0: image 0 scores 0.1 < 0.5 -> rank 2; caption 1: 0.7 > 0.4 -> 1;
    # caption 2: image 1 0.3 < 0.9 -> 2; caption 3: 0.6 > 0.2 -> 1
    assert t2i_ranks(scores, captions_per_image=2).tolist() == [2, 1, 2, 1]


def test_recall_and_median_rank():
    ranks = np.array([1, 2, 3, 6, 11, 20])
    m = recall_summary(ranks)
    assert m["r1"] == pytest.approx(100 / 6)
    assert m["r5"] == pytest.approx(300 / 6)
    assert m["r10"] == pytest.approx(400 / 6)
    # VSE++: floor(median(rank - 1)) + 1 = floor(median([0,1,2,5,10,19])=3.5) + 1 = 4
    assert m["medr"] == 4
    assert m["meanr"] == pytest.approx(43 / 6)


def test_perfect_and_reversed_rankings():
    n, k = 4, 5
    perfect = np.zeros((n, n * k))
    for i in range(n):
        perfect[i, k * i:k * i + k] = 1.0
    r = evaluate_scores(perfect, k)
    assert r["i2t"]["r1"] == 100 and r["t2i"]["r1"] == 100 and r["rsum"] == 600
    assert r["i2t"]["medr"] == 1
    worst = -perfect
    r = evaluate_scores(worst, k)
    assert r["t2i"]["r1"] == 0 and r["t2i"]["medr"] == n


def test_ties_count_against_the_right_answer_only_when_strictly_better():
    scores = np.ones((2, 2))
    assert i2t_ranks(scores, 1).tolist() == [1, 1]


def test_mean_of_folds():
    a = {"i2t": {"r1": 10.0}, "t2i": {"r1": 20.0}, "rsum": 30.0}
    b = {"i2t": {"r1": 30.0}, "t2i": {"r1": 40.0}, "rsum": 70.0}
    assert mean_of_folds([a, b]) == {"i2t": {"r1": 20.0}, "t2i": {"r1": 30.0}, "rsum": 50.0}
