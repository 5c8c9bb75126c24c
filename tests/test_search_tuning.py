"""The search corrections (hubness offset, query gate): values worked out by hand, a model carrying them, the
fit's choices, and bad sections."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_concepts import save_with_bridge, tiny_minilm_model  # noqa: F401  (a fixture)

from imgtxt.errors import ModelError
from imgtxt.model import search_tuning
from imgtxt.research import search_fit


def test_photo_offset_is_the_mean_of_the_top_k_bank_scores():
    photos = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    bank = np.array([[0.9, 0.1], [0.5, 0.5], [0.1, 0.9], [0.3, 0.0]], np.float32)
    # photo 0 scores 0.9, 0.5, 0.1, 0.3 -> top 2: (0.9 + 0.5) / 2; photo 1: 0.1, 0.5, 0.9, 0.0 -> (0.9 + 0.5) / 2
    np.testing.assert_allclose(search_tuning.photo_offsets(photos, bank, 2), [0.7, 0.7], rtol=1e-6)
    np.testing.assert_allclose(search_tuning.photo_offsets(photos, bank, 1, chunk=1), [0.9, 0.9], rtol=1e-6)
    np.testing.assert_allclose(search_tuning.photo_offsets(photos, bank, 99), [0.45, 0.375], rtol=1e-6)


def test_gate_scale_ramps_from_start_over_span():
    classes = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    gate = {"start": 0.5, "span": 0.3, "gain": 4.0}
    parts = np.array([[0.4, 0.3], [0.65, 0.0], [0.0, 0.95]], np.float32)   # best cosines 0.4, 0.65, 0.95
    np.testing.assert_allclose(search_tuning.gate_scale(parts, classes, gate), [1.0, 3.0, 5.0], rtol=1e-5)


@pytest.mark.parametrize("bad, says", [
    ({"hubness": {"top_k": 0, "weight": 0.5}}, "top_k"),
    ({"hubness": {"top_k": 10, "weight": -1}}, "weight"),
    ({"hubness": {"top_k": 10, "weight": 0.5, "center": "x"}}, "center"),
    ({"query_gate": {"start": 0.5, "span": 0, "gain": 3}}, "span"),
    ({"query_gate": {"start": 0.5, "span": 0.3}}, "gain"),
    ({"query_gate": {"start": "a", "span": 0.3, "gain": 1}}, "start"),
    ({"other": 1}, "search must be"),
    ([], "search must be"),
])
def test_bad_sections_are_named(bad, says):
    assert says in search_tuning.check_config(bad)


def test_fit_hubness_demotes_a_hub_and_fit_gate_keeps_val_within_tolerance():
    """Photo 0 is a hub: close to every caption. Without a correction it takes the top of every caption's list;
    with it, each caption finds its own photo. The gate: a gain that costs val more than the tolerance loses."""
    rng = np.random.default_rng(0)
    n, d = 20, 16
    photos = rng.normal(size=(n, d)).astype(np.float32)
    photos /= np.linalg.norm(photos, axis=1, keepdims=True)
    captions = np.repeat(photos, 5, axis=0) + 0.3 * rng.normal(size=(5 * n, d)).astype(np.float32)
    hub = photos.mean(axis=0) * 6
    photos[0] = hub + photos[0]
    bank = captions.copy()
    chosen, rows = search_fit.fit_hubness(photos, captions, bank)
    none = next(r for r in rows if r["weight"] == 0)
    assert chosen["weight"] > 0
    assert max(r["t2i_sum"] for r in rows) > none["t2i_sum"]
    offsets = search_tuning.photo_offsets(photos, bank, chosen["top_k"])
    assert chosen["center"] == pytest.approx(offsets.mean(), abs=1e-4)

    classes = np.eye(d, dtype=np.float32)[:4]
    gate, gate_rows = search_fit.fit_gate(photos @ captions.T, photos, captions, slice(0, d), classes)
    floor = gate_rows[0]["rsum"] - search_fit.GATE_TOLERANCE
    allowed = [r["gain"] for r in gate_rows if r["rsum"] >= floor]
    assert gate["gain"] == max(allowed)
    assert gate["start"] == pytest.approx(np.percentile((captions @ classes.T).max(axis=1), 90), abs=1e-4)


def test_a_model_with_search_corrections(tiny_minilm_model):  # noqa: F811
    """Photo vectors end with -weight * (offset - center), text vectors with 1: one dot product gives the
    corrected score. A query's ConSE part is scaled by its gate; captions are not. The hubness setting is part
    of the model id; a bad section fails at load in one line."""
    from imgtxt.model.modelfile import TrainedModel

    src = TrainedModel.load(tiny_minilm_model)
    bank = ["a dog", "a red car", "two people on a bench"]
    plain_dir = save_with_bridge(src, tiny_minilm_model.parent / "plain", np.random.default_rng(0), bank=bank)
    search = {"hubness": {"top_k": 2, "weight": 0.5, "center": 0.1},
              "query_gate": {"start": -1.0, "span": 0.5, "gain": 3.0}}   # every query fully gated
    out = save_with_bridge(src, tiny_minilm_model.parent / "tuned", np.random.default_rng(0), bank=bank, search=search)
    rng = np.random.default_rng(1)
    plain, model = TrainedModel.load(plain_dir), TrainedModel.load(out)
    assert model.model_id != plain.model_id
    d = plain.vector_dim
    assert model.content_dim == d and model.vector_dim == d + 1

    raw = rng.normal(size=(4, src.features["raw_dim"])).astype(np.float32)
    photos, content = model.encode_raw_images(raw), plain.encode_raw_images(raw)
    np.testing.assert_allclose(photos[:, :d], content, atol=1e-6)
    bank_vectors = plain.encode_text(bank)
    top2 = np.sort(content @ bank_vectors.T, axis=1)[:, -2:].mean(axis=1)
    np.testing.assert_allclose(photos[:, d], -0.5 * (top2 - 0.1), atol=1e-5)

    texts = model.encode_text(["a dog", "a red car"])
    np.testing.assert_allclose(texts[:, :d], plain.encode_text(["a dog", "a red car"]), atol=1e-6)
    assert np.all(texts[:, d] == 1.0)
    np.testing.assert_allclose(model.scores(photos, texts), content @ texts[:, :d].T + photos[:, d:d + 1], atol=1e-5)
    queries = model.encode_query(["a dog", "a red car"])
    h = model.config["joint"]["embed_dim"]
    np.testing.assert_allclose(queries[:, h:d], 4.0 * texts[:, h:d], atol=1e-6)   # 1 + gain, fully gated
    np.testing.assert_allclose(queries[:, :h], texts[:, :h], atol=1e-6)

    saved = json.loads((out / "model.json").read_text())
    saved["search"]["hubness"]["top_k"] = 0
    (out / "model.json").write_text(json.dumps(saved))
    with pytest.raises(ModelError, match="top_k"):
        TrainedModel.load(out)


def test_hubness_rule_takes_the_best_recall_then_the_smaller_weight_by_hand():
    rows = [{"top_k": 3, "weight": 0.0, "t2i_sum": 150.0}, {"top_k": 3, "weight": 0.5, "t2i_sum": 152.0},
            {"top_k": 5, "weight": 0.25, "t2i_sum": 152.0}, {"top_k": 10, "weight": 1.0, "t2i_sum": 151.9},
            {"top_k": 10, "weight": 0.25, "t2i_sum": 152.0}]
    chosen = search_fit.best_recall_smallest_weight(rows, "t2i_sum")
    assert (chosen["top_k"], chosen["weight"]) == (5, 0.25)      # 152 thrice: the smaller weight, then the first


def test_gate_rule_takes_the_largest_gain_within_the_tolerance_of_no_gate_by_hand():
    assert search_fit.GATE_TOLERANCE == 0.25
    rows = [{"gain": 0.0, "rsum": 200.0}, {"gain": 2.0, "rsum": 200.1}, {"gain": 3.0, "rsum": 199.0},
            {"gain": 5.0, "rsum": 199.8}, {"gain": 8.0, "rsum": 199.7}, {"gain": 12.0, "rsum": 150.0}]
    # floor 200.0 - 0.25 = 199.75 (from no gate, not from the best 200.1): 0, 2 and 5 qualify; a dip at 3 does
    # not end the search
    assert search_fit.largest_safe_gain(rows)["gain"] == 5.0
    at_floor = [{"gain": 0.0, "rsum": 200.0}, {"gain": 2.0, "rsum": 199.75}, {"gain": 3.0, "rsum": 199.74}]
    assert search_fit.largest_safe_gain(at_floor)["gain"] == 2.0


def test_the_fits_on_a_split_where_no_setting_changes_anything():
    """A bank orthogonal to the photos gives every photo the offset 0, and class vectors orthogonal to the
    captions' ConSE part give every caption the gate scale 1: every row of both tables ties. Hubness then keeps
    weight 0 (the first top_k), the gate the largest gain (val vetoes nothing)."""
    rng = np.random.default_rng(0)
    n = 6
    photos = np.zeros((n, 8), np.float32)
    photos[:, :4] = rng.normal(size=(n, 4))
    captions = np.repeat(photos, 5, axis=0) + np.concatenate(
        [0.3 * rng.normal(size=(5 * n, 4)), np.zeros((5 * n, 4))], axis=1).astype(np.float32)
    captions[:, 6] = 1.0   # a ConSE part along dim 6, which no class vector has
    bank = np.eye(8, dtype=np.float32)[4:6]
    chosen, rows = search_fit.fit_hubness(photos, captions, bank)
    assert len({r["t2i_sum"] for r in rows}) == 1 and len(rows) == 1 + 3 * 4
    assert (chosen["top_k"], chosen["weight"], chosen["center"]) == (3, 0.0, 0.0)
    classes = np.eye(4, dtype=np.float32)[:2]   # ConSE dims 4-5; the captions sit on dim 6
    gate, gate_rows = search_fit.fit_gate(photos @ captions.T, photos, captions, slice(4, 8), classes)
    assert len({r["rsum"] for r in gate_rows}) == 1
    assert gate == {"start": 0.0, "span": search_fit.SPAN, "gain": max(search_fit.GAINS)}
