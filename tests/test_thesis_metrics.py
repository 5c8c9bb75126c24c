"""The thesis's 1st/rnd/avg/any recall, rPrecision(5) and Med r on examples worked by hand."""
import numpy as np
import pytest

from imgtxt.research.thesis_metrics import format_thesis, r_precision, thesis_metrics


def perfect(n, k=5):
    s = np.zeros((n, n * k))
    for i in range(n):
        s[i, k * i:k * i + k] = 1.0 + np.arange(k) * 0.01
    return s


def test_perfect_scores_everywhere_100():
    m = thesis_metrics(perfect(6))
    for v in ("1st", "rnd", "avg", "any"):
        assert m["i2t"][v][1] == 100
    assert m["i2t"]["rprecision5"] == 100
    assert m["t2i"]["avg"][1] == 100 and m["t2i"]["medr"] == 1


def test_first_caption_variant_only_sees_first_captions():
    # 3 images; only image 0's FIRST caption is wrongly ranked: it scores higher for image 1.
    n, k = 3, 5
    s = perfect(n, k)
    s[1, 0] = 5.0
    m = thesis_metrics(s, k)
    # annotation, 1st pool (captions 0,5,10): image 1 ranks caption 0 above its own -> 2 of 3 hit at R@1
    assert m["i2t"]["1st"][1] == pytest.approx(200 / 3)
    # avg over the five pools: only pool 0 has the error -> (2/3 + 4 * 1) / 5
    assert m["i2t"]["avg"][1] == pytest.approx(100 * (2 / 3 + 4) / 5)
    # any: image 1 still has its own captions... but caption 0 (5.0) beats them -> R@1 miss, R@2 hit
    assert m["i2t"]["any"][1] == pytest.approx(200 / 3) and m["i2t"]["any"][2] == 100
    # search, first captions as queries: caption 0 finds image 1 first -> 2 of 3
    assert m["t2i"]["1st"][1] == pytest.approx(200 / 3)
    assert m["t2i"]["avg"][1] == pytest.approx(100 * 14 / 15)


def test_r_precision_counts_own_captions_in_top_five():
    s = perfect(3)
    s[0, 5] = 9.0     # one caption of image 1 enters image 0's top 5, pushing one own caption out
    assert r_precision(s) == pytest.approx(100 * (4 / 5 + 1 + 1) / 3)


def test_rnd_recall_draws_a_random_caption_not_the_second():
    # Only each image's 2nd caption is matched (score 1 with its image, 0 elsewhere); the others are noise. A "2nd
    # caption" pool would give R@1 100; a random caption per image is the 2nd for ~1/5 of the images.
    n, k = 200, 5
    s = np.random.default_rng(1).random((n, n * k)) * 0.5
    for i in range(n):
        s[:, k * i + 1] = 0.0
        s[i, k * i + 1] = 1.0
    m = thesis_metrics(s, k, seed=0)
    assert 10 < m["i2t"]["rnd"][1] < 40 and 10 < m["t2i"]["rnd"][1] < 40
    assert m["i2t"]["avg"][1] == pytest.approx(100 * (1 + 4 * m["i2t"]["1st"][1] / 100) / 5, abs=5)


def test_median_rank_pools_every_caption():
    # 4 images. First captions: 1 on their image, 0 elsewhere (rank 1). Captions 2-5: -1 on their image, 0
    # elsewhere (rank 4 of 4, ties among the wrong ones do not matter: all score higher). Annotation Med r over the
    # five pools: ranks 1 x 4 and 4 x 16 -> median 4 (one pool alone: 1). Search: the same 20 ranks -> 4.
    n, k = 4, 5
    s = np.zeros((n, n * k))
    for i in range(n):
        s[i, k * i] = 1.0
        s[i, k * i + 1:k * i + k] = -1.0
    m = thesis_metrics(s, k)
    assert m["i2t"]["medr"] == 4 and m["t2i"]["medr"] == 4


def test_recall_is_reported_at_the_theses_k():
    m = thesis_metrics(perfect(12))
    for direction, variants in (("i2t", ("1st", "rnd", "avg", "any")), ("t2i", ("1st", "rnd", "avg"))):
        for v in variants:
            assert list(m[direction][v]) == [1, 2, 5, 10]


def test_rnd_recall_can_draw_the_first_caption():
    # Only each image's 1st caption is matched: the random caption is the 1st for ~1/5 of the images (a draw that
    # skipped the first caption would leave rnd at chance, ~0.5 %).
    n, k = 200, 5
    s = np.random.default_rng(2).random((n, n * k)) * 0.5
    for i in range(n):
        s[:, k * i] = 0.0
        s[i, k * i] = 1.0
    m = thesis_metrics(s, k, seed=0)
    assert 10 < m["i2t"]["rnd"][1] < 40 and 10 < m["t2i"]["rnd"][1] < 40


def test_format_thesis_prints_every_variant_by_hand():
    # the example of test_first_caption_variant_only_sees_first_captions: 1st 2/3, avg 14/15, any 2/3 at R@1;
    # rPrecision(5) (4/5 + 1 + 1) / 3; the seeded random captions avoid image 0's first caption
    s = perfect(3)
    s[1, 0] = 5.0
    assert format_thesis(thesis_metrics(s)) == "\n".join([
        "thesis metrics (R@K for K = 1 2 5 10)",
        "image annotation: Med r 1  rPrecision(5) 93.33",
        "  R@K 1st_txt  66.67  100.00  100.00  100.00",
        "  R@K rnd_txt 100.00  100.00  100.00  100.00",
        "  R@K avg_txt  93.33  100.00  100.00  100.00",
        "  R@K any_txt  66.67  100.00  100.00  100.00",
        "image search: Med r 1",
        "  R@K 1st_txt  66.67  100.00  100.00  100.00",
        "  R@K rnd_txt 100.00  100.00  100.00  100.00",
        "  R@K avg_txt  93.33  100.00  100.00  100.00"])
