"""bench/gallery_size.py: which added photos a phrase counts as right, and tie-safe ranks."""
from __future__ import annotations

import numpy as np
from conftest import load_bench


bench = load_bench("gallery_size")


def test_a_phrase_is_right_for_the_photos_whose_captions_hold_it_as_whole_words():
    captions = ["A black dog runs .", "x", "x", "x", "x",             # photo 0
                "Two black dogs play .", "x", "x", "x", "x",          # photo 1: "black dogs" is not "black dog"
                "x", "x", "x", "x", "a BLACK dog, wet, swims ."]      # photo 2: case and punctuation
    assert bench.phrase_photos("a black dog", captions) == {0, 2}
    assert bench.phrase_photos("black dogs", captions) == {1}


def test_ranks_count_a_tie_against_the_right_photo_and_recall_is_in_percent():
    scores = np.array([[0.5, 0.5, 0.1], [0.2, 0.9, 0.3], [0.9, 0.1, 0.2]])
    ranks = bench.ranks(scores, [frozenset({0}), frozenset({0, 2}), frozenset({0})])
    assert ranks.tolist() == [2, 2, 1]
    assert bench.recall(ranks) == [33.3, 100.0, 100.0]


def test_intrusions_count_the_queries_with_an_added_photo_among_their_k_best():
    # photos 0-2 are the gallery's own, 3-4 added; k = 2
    scores = np.array([[0.9, 0.8, 0.1, 0.2, 0.0],     # best two: 0, 1 -> no intrusion
                       [0.1, 0.9, 0.2, 0.95, 0.0],    # best two: 3, 1 -> an added photo
                       [0.5, 0.1, 0.2, 0.3, 0.6]])    # best two: 4, 0 -> an added photo
    assert bench.intrusions(scores, 3, k=2) == 66.7
    assert bench.intrusions(scores[:, :3], 3, k=2) == 0.0
