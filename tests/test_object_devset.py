"""bench/object_devset.py's scoring on hand-made rankings, and its queries naming only photos of the set."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_bench


devset = load_bench("object_devset")


@pytest.mark.parametrize("ranked, right, expected", [
    (["dog.jpg", "beach.jpg", "coffee"], {"coffee"}, 3),
    (["coffee", "chelsea"], {"coffee"}, 1),
    (["dog.jpg", "quokka", "chelsea"], {"chelsea", "quokka"}, 2),   # the first of several right photos counts
    (["dog.jpg", "beach.jpg"], {"coffee"}, None),                    # not ranked at all
    ([], {"coffee"}, None),
])
def test_first_right_rank(ranked, right, expected):
    assert devset.first_right_rank(ranked, right) == expected


def test_recall_at_k_counts_ranks_up_to_k_and_misses_as_misses():
    ranks = [1, 5, 6, 10, 11, None, 2, 30]
    assert devset.recall_at(ranks, 1) == 1 / 8
    assert devset.recall_at(ranks, 5) == 3 / 8      # 1, 5, 2: a rank equal to k is in the top k
    assert devset.recall_at(ranks, 10) == 5 / 8
    assert devset.recall_at([None, None], 10) == 0.0
    with pytest.raises(ValueError):
        devset.recall_at([], 1)


def test_every_query_names_photos_of_the_set_and_every_photo_is_asked_for():
    names = {Path(photo.name).stem for photo in devset.PHOTOS}
    assert len(names) == len(devset.PHOTOS)
    wanted = set()
    for query, right in devset.QUERIES:
        assert right and right <= names, query
        wanted |= right
    assert wanted == names
    assert len({query for query, _ in devset.QUERIES}) == len(devset.QUERIES)
    for query, right in devset.PHOTO_OF_QUERIES:
        assert query.startswith("a photo of ") and right and right <= names, query
    assert len({query for query, _ in devset.PHOTO_OF_QUERIES}) == len(devset.PHOTO_OF_QUERIES)


def test_a_missing_package_is_named_in_one_line():
    photo = devset.Photo("x.jpg", "no_such_package_here", "x.jpg", "x", "CC0", "nowhere")
    with pytest.raises(devset.DevSetError, match=r"'no_such_package_here', which is not installed") as error:
        devset.package_file(photo)
    assert "\n" not in str(error.value)
    assert "pip install '.[devset]' in the imgtxt checkout" in str(error.value)   # imgtxt is on no index
