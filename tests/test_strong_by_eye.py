"""bench/strong_by_eye.py: which strong top results the benchmark's labels count wrong."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from conftest import load_bench

bench = load_bench("strong_by_eye")


def test_strong_wrong_keeps_the_strong_top_results_outside_the_right_photos_of_one_kind():
    fake = SimpleNamespace(kinds=["caption", "caption", "caption", "phrase"],
                           scores=np.array([[0.9, 0.1, 0.2], [0.1, 0.8, 0.3], [0.2, 0.1, 0.4], [0.9, 0.2, 0.1]]),
                           right=[frozenset({0}), frozenset({2}), frozenset({1}), frozenset({1})])

    def level(q, score):                     # strong at 0.5 and above
        return "strong" if score >= 0.5 else "weak"

    # caption 0: strong, right; caption 1: strong, photo 1 not its own; caption 2: weak; the phrase: another kind
    assert bench.strong_wrong(fake, level, "caption") == (3, 2, [(1, 1)])
    assert bench.strong_wrong(fake, level, "phrase") == (1, 1, [(3, 0)])


def test_sheets_number_the_photos_twelve_to_a_sheet(tmp_path):
    from PIL import Image

    paths = []
    for i in range(13):
        paths.append(tmp_path / f"{i}.png")
        Image.new("RGB", (40, 30), (i * 15, 0, 0)).save(paths[-1])
    sheets = bench.draw_sheets(paths, tmp_path / "sheets")
    assert [s.name for s in sheets] == ["sheet-0.png", "sheet-1.png"]
    with Image.open(sheets[0]) as first:
        assert first.size == (4 * bench.CELL, 3 * bench.CELL)
        assert first.getpixel((bench.CELL + 150, 150)) == (15, 0, 0)   # the second photo, in the second cell
