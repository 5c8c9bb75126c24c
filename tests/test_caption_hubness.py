"""The captions' hubness correction: the penalty worked out by hand, the fit demoting a hub caption, a model
carrying it in `caption` and in eval, and a damaged file falling back to plain scores with a notice."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_concepts import save_with_bridge, tiny_minilm_model  # noqa: F401  (a fixture)

from imgtxt.model import caption_offsets
from imgtxt.research.caption_fit import fit_caption_hubness


def unit(rows) -> np.ndarray:
    a = np.asarray(rows, np.float32)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_penalty_is_weight_times_the_offset_above_the_center():
    section = {"top_k": 2, "weight": 0.5, "center": 0.4}
    np.testing.assert_allclose(caption_offsets.penalty([0.2, 0.4, 0.5, 0.9], section), [0, 0, 0.05, 0.25],
                               atol=1e-7)


def test_penalties_measure_captions_against_the_reference_photos():
    reference = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], np.float32)
    hub = caption_offsets.CaptionHubness({"top_k": 2, "weight": 2.0, "center": 0.5}, reference, np.zeros(0))
    captions = np.array([[1.0, 0.0], [0.0, 0.5]], np.float32)
    # caption 0 scores 1.0, 0.0, 0.6 -> top 2 mean 0.8 -> 2 * (0.8 - 0.5) = 0.6; caption 1: 0, 0.5, 0.4 -> 0.45 -> 0
    np.testing.assert_allclose(hub.penalties(captions), [0.6, 0.0], atol=1e-6)


def test_the_fit_demotes_a_hub_caption():
    """Photo 0's captions score 0.8 with it; caption 5 (photo 1's) scores ~0.85 with photo 0 and sits near most
    reference photos: without the correction photo 0's best caption ranks 2nd, with it 1st."""
    photos = unit([[1, 0, 0], [0, 1, 0]])
    captions = unit([[0.8, 0, 0.6]] * 5 + [[0.85, 0.5, 0.15]] + [[0, 0.9, 0.436]] * 4)
    reference = unit([[0.85, 0.5, 0.15]] * 5 + [[0, 0, 1]] * 5)
    chosen, table = fit_caption_hubness(photos, captions, reference)
    assert table[0]["weight"] == 0 and table[0]["i2t"][0] == 50.0
    assert chosen["weight"] > 0 and max(r["i2t_sum"] for r in table) == 300.0
    # top_k 5 reaches only the hub's five reference twins: its offset 1 is above the centre, the others' are not;
    # every weight from 0.5 demotes it (300), and the rule keeps the smallest
    assert (chosen["top_k"], chosen["weight"]) == (5, 0.5)
    assert [r["i2t_sum"] for r in table if r["top_k"] == 5] == [250.0, 300.0, 300.0, 300.0, 300.0]
    top_k = chosen["top_k"]
    offsets = np.sort(captions @ reference.T, axis=1)[:, -top_k:].mean(axis=1)
    assert chosen["center"] == pytest.approx(float(np.median(offsets)), abs=1e-4)


@pytest.fixture()
def model_with_hubness(tiny_minilm_model):  # noqa: F811
    from imgtxt.model.modelfile import TrainedModel

    src = TrainedModel.load(tiny_minilm_model)
    bank = ["a dog", "a red car", "two people on a bench", "a child on a swing"]
    folder = save_with_bridge(src, tiny_minilm_model.parent / "hub", np.random.default_rng(0), bank=bank)
    model = TrainedModel.load(folder)
    rng = np.random.default_rng(2)
    reference = unit(rng.normal(size=(6, model.content_dim)))
    section = {"top_k": 2, "weight": 1.5, "center": 0.0, "reference_stride": 1}
    offsets = np.array([0.3, -0.2, 0.1, 0.5], np.float32)
    caption_offsets.write(folder, reference, offsets, section)
    return TrainedModel.load(folder), bank, offsets


def test_caption_ranks_the_bank_by_score_minus_its_stored_penalty(model_with_hubness):
    from imgtxt.library.query import caption

    model, bank, offsets = model_with_hubness
    vector = unit(np.random.default_rng(3).normal(size=(1, model.vector_dim)))[0]
    d = model.content_dim
    plain = model.encode_text(bank)[:, :d] @ vector[:d]
    expected = plain - 1.5 * np.maximum(offsets, 0)
    hits = caption(model, vector, n=4)
    assert [h.value for h in hits] == [bank[i] for i in np.argsort(-expected, kind="stable")]
    np.testing.assert_allclose(sorted(h.score for h in hits), sorted(expected), atol=2e-2)  # int8 bank vectors

    own = ["a dog", "a cat"]   # a caption list of one's own: offsets measured against the stored reference
    hub = model.caption_hubness(len(bank))
    own_vectors = model.encode_text(own)[:, :d]
    reference = hub.reference
    own_offsets = np.sort(own_vectors @ reference.T, axis=1)[:, -2:].mean(axis=1)
    want = own_vectors @ vector[:d] - 1.5 * np.maximum(own_offsets, 0)
    got = {h.value: h.score for h in caption(model, vector, n=2, captions=own)}
    np.testing.assert_allclose([got[c] for c in own], want, atol=1e-4)


def test_eval_applies_the_penalty_to_photo_to_text_only(model_with_hubness):
    from imgtxt.research.evaluate import search_and_caption_scores
    from imgtxt.research.metrics import evaluate_scores

    model, bank, _ = model_with_hubness
    rng = np.random.default_rng(4)
    images = model.encode_raw_images(rng.normal(size=(3, model.features["raw_dim"])).astype(np.float32))
    texts = [f"caption {i} of a photo" for i in range(15)]
    captions = model.encode_text(texts)
    penalties = model.caption_hubness(len(bank)).penalties(captions[:, :model.content_dim])
    assert penalties.max() > 0   # the check below must be able to fail
    got = search_and_caption_scores(model, images, texts, captions)
    scores = model.scores(images, captions)
    assert got["i2t"] == evaluate_scores(scores - penalties[None, :])["i2t"]
    assert got["t2i"] == evaluate_scores(scores)["t2i"]


@pytest.mark.parametrize("damage, says", [("garble", "damaged"), ("captions", "stale"), ("missing", "missing")])
def test_a_damaged_file_gives_plain_scores_and_a_notice(model_with_hubness, damage, says):
    from imgtxt.library.query import caption

    model, bank, _ = model_with_hubness
    path = model.folder / caption_offsets.FILE
    if damage == "garble":
        data = bytearray(path.read_bytes())
        data[-10] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "captions":
        (model.folder / "captions.txt").write_text("\n".join(bank[::-1]) + "\n")
    else:
        path.unlink()
    notices: list[str] = []
    assert caption_offsets.load(model, len(bank), notices) is None
    assert len(notices) == 1 and says in notices[0] and "\n" not in notices[0]
    vector = unit(np.random.default_rng(3).normal(size=(1, model.vector_dim)))[0]
    hits = caption(model, vector, n=4, notices=notices)
    assert len(hits) == 4


def test_a_bad_section_is_named(model_with_hubness):
    model, bank, _ = model_with_hubness
    config = json.loads((model.folder / "model.json").read_text())
    config["caption_hubness"]["top_k"] = 0
    model.config["caption_hubness"] = config["caption_hubness"]
    notices: list[str] = []
    assert caption_offsets.load(model, len(bank), notices) is None
    assert "top_k" in notices[0]


def test_tune_captions_command_refuses_test_then_dry_runs_then_writes(model_with_hubness, tmp_path, monkeypatch):
    """The command end to end, its fit stubbed (the fit itself: test_the_fit_demotes_a_hub_caption)."""
    from click.testing import CliRunner

    from imgtxt.cli.main import app
    from imgtxt.research import caption_fit

    model, bank, _ = model_with_hubness
    (model.folder / caption_offsets.FILE).unlink()
    config = json.loads((model.folder / "model.json").read_text())
    config.pop("caption_hubness")
    (model.folder / "model.json").write_text(json.dumps(config))
    reference = unit(np.random.default_rng(5).normal(size=(3, model.content_dim)))
    section = {"top_k": 2, "weight": 0.5, "center": 0.1, "reference_stride": 2, "fitted_on": {"split": "val"}}
    table = [{"top_k": 2, "weight": 0.5, "i2t": [1.0, 2.0, 3.0], "i2t_sum": 6.0}]
    monkeypatch.setattr(caption_fit, "tune_captions",
                        lambda *a, **k: (section, reference, np.arange(len(bank), dtype=np.float32), table))
    (tmp_path / "data").mkdir()
    args = ["tune-captions", str(model.folder), "--data-dir", str(tmp_path / "data")]
    runner = CliRunner()
    refused = runner.invoke(app, args + ["--split", "test"])
    assert refused.exit_code != 0 and "held out" in refused.stderr
    dry = runner.invoke(app, args + ["--dry-run"])
    assert dry.exit_code == 0, dry.stderr
    assert "sum 6.00" in dry.stdout and not (model.folder / caption_offsets.FILE).exists()
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.stderr
    from imgtxt.model.modelfile import TrainedModel

    hub = TrainedModel.load(model.folder).caption_hubness(len(bank))
    np.testing.assert_allclose(hub.bank_penalties(), 0.5 * np.maximum(np.arange(len(bank)) - 0.1, 0), atol=1e-6)
    np.testing.assert_allclose(hub.reference, reference, atol=0.01)   # int8 rows


def test_offsets_that_are_not_finite_are_refused(model_with_hubness):
    """A model folder whose file and record agree but hold NaN: refused with a notice, not NaN scores."""
    model, bank, _ = model_with_hubness
    reference = np.ones((3, model.content_dim), np.float32)
    caption_offsets.write(model.folder, reference, np.array([0.1, np.nan, 0.2, 0.3], np.float32),
                          {"top_k": 2, "weight": 1.0, "center": 0.0, "reference_stride": 1})
    from imgtxt.model.modelfile import TrainedModel

    notices: list[str] = []
    assert TrainedModel.load(model.folder).caption_hubness(len(bank), notices) is None
    assert "not finite" in notices[0]


def test_photo_gate_scale_worked_by_hand():
    """m is the best cosine of a photo's ConSE part to the class names, whatever the part's length."""
    class_vectors = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    gate = {"start": 0.9, "span": 0.1, "gain": 2.0}
    parts = 0.25 * np.array([[1.0, 0.0],                      # m = 1    -> 1 + 2 * 1
                             [0.95, np.sqrt(1 - 0.95 ** 2)],  # m = 0.95 -> 1 + 2 * 0.5
                             [0.0, 0.6],                      # m = 1 (length 0.15)
                             [0.6, 0.8]], np.float32)         # m = 0.8  -> 1
    np.testing.assert_allclose(caption_offsets.photo_gate_scale(parts, class_vectors, gate), [3.0, 2.0, 3.0, 1.0],
                               atol=1e-5)


def test_the_photo_gate_fit_keeps_the_smallest_gain_with_the_best_recall():
    """Two photos, joint dims 0-1, ConSE dims 2-3. Photo 0's part is one class (m = 1), photo 1's halfway
    (m = 0.707). Photo 0's captions score 0.5 + 0.2 x scale with it, photo 1's 0.75: ranked 6th without a gate,
    1st from scale 1.5 (gain 0.5) on. Photo 1's captions rank 6th whatever the gain (its scale stays 1)."""
    from imgtxt.research.caption_fit import fit_photo_gate

    class_vectors = np.eye(2, dtype=np.float32)
    photos = np.array([[1, 0, 0.2, 0], [0, 1, 0.2 * 0.7071, 0.2 * 0.7071]], np.float32)
    captions = np.array([[0.5, 0.6, 1, 0]] * 5 + [[0.75, 0.3, 0, 1]] * 5, np.float32)
    gate, table = fit_photo_gate(photos, captions, np.zeros(10, np.float32), slice(2, 4), class_vectors)
    assert gate["start"] == pytest.approx(0.7071 + 0.9 * (1 - 0.7071), abs=1e-3)
    assert gate["span"] == pytest.approx(1 - gate["start"], abs=1e-4)
    by_gain = {r["gain"]: r["i2t_sum"] for r in table}
    assert by_gain[0.0] == 100.0 and by_gain[0.5] == by_gain[3.0] == 200.0
    assert gate["gain"] == 0.5
    # The chosen hubness's penalties are subtracted: 0.3 off photo 1's captions puts them at 0.45 with photo 0,
    # below photo 0's own 0.7 without any gate, so every gain ties at 200 and the smallest (0) is kept. (Added
    # instead, they would score 1.05 and only gains from 2 would lift photo 0's captions above them.)
    penalties = np.array([0.0] * 5 + [0.3] * 5, np.float32)
    gate, table = fit_photo_gate(photos, captions, penalties, slice(2, 4), class_vectors)
    assert {r["i2t_sum"] for r in table} == {200.0} and gate["gain"] == 0.0


def test_the_concept_scale_fit_keeps_the_largest_scale_val_does_not_veto():
    """Two photos, joint dims 0-1, ConSE dims 2-3, s the scale. Photo 0's captions score 0.5 + 0.2 s with it and
    0.6 is the best other: first at every s. Photo 1's own captions score 0.9, photo 0's 0.5 s with it: first
    while s < 1.8, sixth at s = 2 (R@1 and R@5 lost). Every scale up to 1.6 ties with scale 1 and the largest is
    kept (the best-recall rule would keep 1)."""
    from imgtxt.research.caption_fit import fit_concept_scale

    photos = np.array([[1, 0, 0.2, 0], [0, 1, 0, 0.5]], np.float32)
    captions = np.array([[0.5, 0, 1, 1]] * 5 + [[0.6, 0.9, 0, 0]] * 5, np.float32)
    scale, table = fit_concept_scale(photos, captions, np.zeros(10, np.float32), slice(2, 4))
    assert [(r["scale"], r["i2t_sum"]) for r in table] == [(1.0, 300.0), (1.2, 300.0), (1.4, 300.0), (1.6, 300.0),
                                                            (2.0, 200.0)]
    assert scale == 1.6


@pytest.mark.parametrize("value", [0, -1.0, "x", float("nan")])
def test_a_bad_concept_scale_is_named(model_with_hubness, value):
    model, bank, _ = model_with_hubness
    model = _with_caption_hubness(model, concept_scale=value)
    notices: list[str] = []
    assert caption_offsets.load(model, len(bank), notices) is None
    assert "concept_scale" in notices[0] and "\n" not in notices[0]


def _with_caption_hubness(model, **fields):
    """model.json's caption_hubness with these fields added, the stored file unchanged."""
    from imgtxt.model.modelfile import TrainedModel

    path = model.folder / "model.json"
    config = json.loads(path.read_text())
    config["caption_hubness"].update(fields)
    path.write_text(json.dumps(config))
    return TrainedModel.load(model.folder)


EVERY_PHOTO_GATED = {"start": -2.0, "span": 0.5, "gain": 1.0}   # a start every photo passes: x 2


@pytest.mark.parametrize("fields, factor", [({"photo_gate": EVERY_PHOTO_GATED}, 2.0),
                                            ({"concept_scale": 3.0}, 3.0),
                                            ({"concept_scale": 1.5, "photo_gate": EVERY_PHOTO_GATED}, 3.0)])
def test_caption_and_eval_score_the_scaled_and_gated_photo(model_with_hubness, fields, factor):
    """The concept scale and a gate whose start every photo passes (gain 1: x 2) multiply the photo's ConSE part
    in `caption` and in eval's photo -> text recall; text -> photo recall is untouched."""
    from imgtxt.library.query import caption
    from imgtxt.research.evaluate import search_and_caption_scores
    from imgtxt.research.metrics import evaluate_scores

    model, bank, offsets = model_with_hubness
    model = _with_caption_hubness(model, **fields)
    h, d = model.config["joint"]["embed_dim"], model.content_dim
    vector = unit(np.random.default_rng(3).normal(size=(1, model.vector_dim)))[0]
    text = model.encode_text(bank)
    expected = text[:, :h] @ vector[:h] + factor * text[:, h:d] @ vector[h:d] - 1.5 * np.maximum(offsets, 0)
    hits = caption(model, vector, n=4)
    assert [x.value for x in hits] == [bank[i] for i in np.argsort(-expected, kind="stable")]
    np.testing.assert_allclose(sorted(x.score for x in hits), sorted(expected), atol=2e-2)

    rng = np.random.default_rng(4)
    images = model.encode_raw_images(rng.normal(size=(3, model.features["raw_dim"])).astype(np.float32))
    texts = [f"caption {i} of a photo" for i in range(15)]
    captions = model.encode_text(texts)
    scaled = images[:, :d].copy()
    scaled[:, h:d] *= factor
    penalties = model.caption_hubness(len(bank)).penalties(captions[:, :d])
    got = search_and_caption_scores(model, images, texts, captions)
    assert got["i2t"] == evaluate_scores(scaled @ captions[:, :d].T - penalties[None, :])["i2t"]
    assert got["t2i"] == evaluate_scores(model.scores(images, captions))["t2i"]


@pytest.mark.parametrize("gate, says", [({"start": 0.9, "span": 0, "gain": 1}, "photo_gate"),
                                        ({"start": 0.9, "span": 0.1}, "photo_gate"),
                                        ({"start": "x", "span": 0.1, "gain": 1}, "photo_gate")])
def test_a_bad_photo_gate_is_named(model_with_hubness, gate, says):
    model, bank, _ = model_with_hubness
    model = _with_caption_hubness(model, photo_gate=gate)
    notices: list[str] = []
    assert caption_offsets.load(model, len(bank), notices) is None
    assert says in notices[0] and "\n" not in notices[0]


def test_the_caption_fit_keeps_weight_zero_when_no_setting_changes_anything():
    """Reference photos orthogonal to every caption: every offset is 0, so is the centre, so every penalty; all
    rows tie and the rule keeps the smaller weight (0) at the first top_k."""
    from imgtxt.research.caption_fit import TOP_KS, WEIGHTS

    photos = unit([[1, 0, 0, 0], [0, 1, 0, 0]])
    captions = unit([[0.8, 0.2, 0, 0]] * 5 + [[0.3, 0.7, 0, 0]] * 5)
    reference = unit([[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 1, 1]])
    chosen, table = fit_caption_hubness(photos, captions, reference)
    assert len(table) == 1 + len(TOP_KS) * (len(WEIGHTS) - 1) and len({r["i2t_sum"] for r in table}) == 1
    assert chosen == {"top_k": TOP_KS[0], "weight": 0.0, "center": 0.0}
