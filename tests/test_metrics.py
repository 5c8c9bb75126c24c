"""Recall@K, Med r and mean r against ranks computed by hand."""
import math

import numpy as np
import pytest

from imgtxt.research.metrics import (
    evaluate_scores,
    i2t_ranks,
    mean_of_folds,
    recall_summary,
    t2i_ranks,
)


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


def test_ties_are_resolved_pessimistically_or_in_expectation():
    scores = np.ones((2, 2))
    assert i2t_ranks(scores, 1, ties="pessimistic").tolist() == [2, 2]
    assert i2t_ranks(scores, 1, ties="expected").tolist() == [1.5, 1.5]


@pytest.mark.parametrize("n", [20, 100])
def test_constant_scores_give_chance_level_recall_not_rsum_600(n):
    k = 5
    r = evaluate_scores(np.zeros((n, n * k)), k)
    # t2i: the right image is one of n in a random order -> R@K = K/n exactly
    for K, key in ((1, "r1"), (5, "r5"), (10, "r10")):
        assert r["t2i"][key] == pytest.approx(100 * K / n)
    # i2t: 5 right captions among 5n -> P(hit in top K) = 1 - C(5n-5, K) / C(5n, K)
    from math import comb
    for K, key in ((1, "r1"), (5, "r5"), (10, "r10")):
        assert r["i2t"][key] == pytest.approx(100 * (1 - comb(5 * n - 5, K) / comb(5 * n, K)))
    assert r["rsum"] < 100 * 2 * 16 / n + 1e-9        # chance, far from 600
    assert r["t2i"]["medr"] >= n // 2
    pess = evaluate_scores(np.zeros((n, n * k)), k, ties="pessimistic")
    assert pess["rsum"] == 0 and pess["t2i"]["medr"] == n


def test_partial_ties_by_hand():
    # 1 caption query vs 4 images: image 0 (right) ties with images 1 and 2, image 3 is strictly better.
    scores = np.array([[0.5], [0.5], [0.5], [0.9]])
    from imgtxt.research.metrics import t2i_counts
    c = t2i_counts(scores, 1)
    assert (c.higher.tolist(), c.tied.tolist(), c.own_tied.tolist()) == ([1], [2], [1])
    assert c.ranks("expected").tolist() == [1 + 1 + 2 / 2]
    assert c.recall_at(1) == 0                       # the better image takes place 1
    assert c.recall_at(2) == pytest.approx(100 / 3)  # right image first of three tied
    assert c.recall_at(5) == 100


def test_mean_of_folds():
    a = {"i2t": {"r1": 10.0}, "t2i": {"r1": 20.0}, "rsum": 30.0}
    b = {"i2t": {"r1": 30.0}, "t2i": {"r1": 40.0}, "rsum": 70.0}
    assert mean_of_folds([a, b]) == {"i2t": {"r1": 20.0}, "t2i": {"r1": 30.0}, "rsum": 50.0}


def test_ties_default_to_expected_and_an_unknown_mode_is_named():
    from imgtxt.research.metrics import TIES, RankCounts

    # one query: 1 wrong answer above, 2 tied with the right one (alone): expected rank 1 + 1 + 2/2 = 3
    counts = RankCounts(np.array([1]), np.array([2]), np.array([1]))
    assert counts.ranks().tolist() == [3.0] and counts.ranks("pessimistic").tolist() == [4.0]
    # R@2: one slot left for the tied group of 3 (2 wrong, 1 right) -> 1/3
    assert counts.recall_at(2) == pytest.approx(100 / 3)
    assert TIES == ("expected", "pessimistic")
    with pytest.raises(ValueError) as error:
        counts.ranks("best")
    assert str(error.value) == "ties must be one of ('expected', 'pessimistic'), not 'best'"


def test_five_captions_per_image_by_default_and_pessimistic_recall_by_hand():
    # 2 images x 5 captions, every caption scores 1 with its own image and 0 with the other: perfect with the
    # default of five captions per image (six would misplace the captions of image 1)
    scores = np.repeat(np.eye(2), 5, axis=1)
    assert evaluate_scores(scores)["rsum"] == 600
    assert i2t_ranks(scores).tolist() == [1, 1] and t2i_ranks(scores).tolist() == [1] * 10
    from imgtxt.research.metrics import i2t_counts, t2i_counts

    assert i2t_counts(scores).ranks().tolist() == [1, 1] and t2i_counts(scores).ranks().tolist() == [1] * 10
    from imgtxt.research.metrics import RankCounts

    # pessimistic: 1 above + 2 tied wrong -> rank 4: a hit at R@4 (100 %, not 101) and a miss at R@3
    counts = RankCounts(np.array([1, 0]), np.array([2, 0]), np.array([1, 1]))
    assert counts.recall_at(4, "pessimistic") == 100.0 and counts.recall_at(3, "pessimistic") == 50.0


@pytest.mark.parametrize("n", [20, 100])
def test_median_rank_under_ties_by_hand_in_both_directions(n):
    """Constant scores, n images x 5 captions. i2t: an image's 5 captions tie with the 5n - 5 others; in a random
    order the expected number of wrong captions before the first right one is (5n - 5) / (5 + 1), so the rank is
    1 + (5n - 5) / 6 (n = 100: 83.5, Med r floor(82.5) + 1 = 83; n = 20: 16.83, Med r 16). t2i: the right image
    ties with n - 1 others: rank 1 + (n - 1) / 2 (n = 100: 50.5, Med r 50; n = 20: 10.5, Med r 10)."""
    r = evaluate_scores(np.zeros((n, 5 * n)))
    i2t_rank, t2i_rank = 1 + (5 * n - 5) / 6, 1 + (n - 1) / 2
    assert r["i2t"]["meanr"] == pytest.approx(i2t_rank)
    assert r["t2i"]["meanr"] == pytest.approx(t2i_rank)
    assert r["i2t"]["medr"] == {100: 83, 20: 16}[n] == math.floor(i2t_rank - 1) + 1
    assert r["t2i"]["medr"] == {100: 50, 20: 10}[n] == math.floor(t2i_rank - 1) + 1


def test_median_rank_with_several_right_answers_tied_by_hand():
    """2 images x 2 captions. Image 0: both own captions (0.5) tie with caption 2 of image 1, caption 3 is below:
    one wrong and two right in a random order -> 1 / 3 wrong expected before the first right one, rank 4/3.
    Image 1: its caption 3 (0.9) is beaten by none, its caption 2 (0.1) is irrelevant: rank 1.
    t2i: caption 2 scores 0.5 with image 0 and 0.1 with its own image 1: rank 2; the others rank 1."""
    scores = np.array([[0.5, 0.5, 0.5, 0.2],
                       [0.0, 0.0, 0.1, 0.9]])
    assert i2t_ranks(scores, 2).tolist() == pytest.approx([4 / 3, 1.0])
    assert t2i_ranks(scores, 2).tolist() == [1.0, 1.0, 2.0, 1.0]
    r = evaluate_scores(scores, 2)
    # Med r: floor(median([1/3, 0])) + 1 = floor(1/6) + 1 = 1; mean r (4/3 + 1) / 2
    assert r["i2t"]["medr"] == 1 and r["i2t"]["meanr"] == pytest.approx(7 / 6)
    assert r["t2i"]["meanr"] == pytest.approx(5 / 4)
