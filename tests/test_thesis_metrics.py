"""The thesis's 1st/rnd/avg/any recall, rPrecision(5) and Med r on examples worked by hand."""
import numpy as np
import pytest

from imgtxt.research.thesis_metrics import r_precision, thesis_metrics


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
