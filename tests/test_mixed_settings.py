"""bench/mixed_settings.py's figures and its query-gate sweep on a hand-made score matrix."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from conftest import load_bench


settings = load_bench("mixed_settings")

# Two Flickr8k photos (columns 0, 1) and one object photo (column 2); one query of each kind, in KINDS' order.
KINDS = np.array(["caption", "phrase", "object", "photo-of"])
RIGHT = [frozenset({0}), frozenset({1}), frozenset({2}), frozenset({2})]
JOINT = np.array([[0.5, 0.2, 0.3],
                  [0.2, 0.1, 0.3],     # the phrase: its photo below the other val photo and the object photo
                  [0.1, 0.4, 0.3],     # the object query: the object photo 2nd on the joint cosine alone
                  [0.1, 0.5, 0.3]])    # "a photo of a": 2nd too
CONSE = np.array([[0.0, 0.0, 0.2],
                  [0.0, 0.0, 0.0],
                  [0.0, 0.0, 0.04],
                  [0.0, 0.0, 0.04]])
# name-likeness: the object query half way into the gate, "a photo of a" fully past it, the others below it
PARTS = SimpleNamespace(joint=JOINT, conse=CONSE, hub=np.zeros(3), name_like=np.array([0.1, 0.2, 0.65, 0.9]))
GATE = {"start": 0.5, "span": 0.3, "gain": 2.0}


def test_figures_rank_each_kind_and_count_object_photos_in_scene_queries():
    scores = JOINT + CONSE   # gain 0: the ConSE part as it is
    row = settings.figures(scores, KINDS, RIGHT, flickr=2)
    assert row["caption"] == [0.0, 100.0, 100.0]            # 0.5 against 0.5 (object photo: 0.3 + 0.2): a tie counts against it
    assert row["phrase"] == [0.0, 100.0, 100.0]             # below the object photo and its neighbour: rank 3
    assert row["object"] == [0.0, 100.0, 100.0]             # 0.34 against 0.4: rank 2
    assert row["mean_sum"] == 200.0
    assert row["val_t2i_sum"] == 300.0                      # the caption among the val photos alone
    assert row["intrusions_caption"] == 100.0 and row["intrusions_phrase"] == 100.0   # 3 photos: all in the top 10


def test_the_gate_gain_lifts_only_the_queries_it_opens_for():
    rows = {r["gate_gain"]: r for r in settings.gate_sweep(PARTS, KINDS, RIGHT, 2, GATE)}
    assert [r["gate_gain"] for r in settings.gate_sweep(PARTS, KINDS, RIGHT, 2, GATE)] == list(settings.GATE_GAINS)
    assert rows[2.0]["model_setting"] and not rows[3.0]["model_setting"]
    # "a photo of a" (gate fully open): 0.3 + (1 + g) 0.04 beats 0.5 from g = 5 on (0.3 + 0.24 = 0.54)
    assert rows[3.0]["photo-of"][0] == 0.0 and rows[5.0]["photo-of"][0] == 100.0
    # the object query, half open (scale 1 + g / 2): 0.3 + (1 + g/2) 0.04 ties 0.4 at g = 3 and beats it at 5 (0.44)
    assert rows[3.0]["object"][0] == 0.0 and rows[5.0]["object"][0] == 100.0
    # the caption's gate stays shut: its ranking is the same at every gain
    assert {tuple(r["caption"]) for r in rows.values()} == {(0.0, 100.0, 100.0)}


def test_the_hubness_bank_with_every_class_line_stops_lifting_an_object_photo_whose_class_line_was_left_out():
    # dims: a caption's direction, class "tench", class "cup"; the bank's every 2nd line holds no "cup" line
    lines = ["A dog runs on the grass .", "A cat sits .", "A photo of a tench.", "A photo of a cup."]
    bank = np.array([[1, 0, 0], [0.9, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    model = SimpleNamespace(hubness={"top_k": 1, "weight": 1.0, "bank_stride": 2}, content_dim=3,
                            caption_bank=lambda: lines, caption_bank_vectors=lambda stride: bank[::stride])
    gallery = np.array([[1, 0, 0, 9], [0.5, 0, 0, 9], [0, 0, 1, 9]], np.float32)   # 2 val photos, a cup photo
    joint = np.array([[0.9, 0.3, 0.2], [0.1, 0.5, 0.0], [0.2, 0.1, 0.5], [0.0, 0.0, 0.6]])
    parts = SimpleNamespace(joint=joint, conse=np.zeros((4, 3)), gate=np.ones(4))
    rows = {r["bank"]: r for r in settings.hub_bank_sweep(parts, gallery, model, KINDS, RIGHT, 2)}
    assert list(rows) == ["the model's", "captions alone", "captions + every class line", "every line"]
    assert [rows[b]["bank_rows"] for b in rows] == [2, 1, 3, 4]
    # offsets (top 1): the val photos 1 and 0.5 (centre 0.75); the cup photo 0 without its line, 1 with it
    assert rows["the model's"]["offset_flickr"] == 0.75 and rows["the model's"]["offset_objects"] == 0.0
    assert rows["every line"]["offset_objects"] == 1.0
    # the model's bank lifts the cup photo by 0.75: the caption (0.65 against 0.95) and the phrase (a tie at 0.75)
    # lose their first place to it; the object query gets it
    assert rows["the model's"]["caption"][0] == 0.0 and rows["the model's"]["phrase"][0] == 0.0
    assert rows["the model's"]["object"][0] == 100.0 and rows["the model's"]["model_setting"]
    assert rows["captions alone"]["caption"] == rows["the model's"]["caption"]
    # with its class line the cup photo is pushed down by 0.25 instead: the scene queries get first place back,
    # the object query (0.25 against 0.35) loses it
    for bank_name in ("captions + every class line", "every line"):
        assert rows[bank_name]["caption"][0] == 100.0 and rows[bank_name]["phrase"][0] == 100.0
        assert rows[bank_name]["object"] == [0.0, 100.0, 100.0] and rows[bank_name]["photo-of"][0] == 100.0
