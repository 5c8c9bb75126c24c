"""The ConSE bridge on hand-made tensors: values worked out by hand, the fused score, and bad sections."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from imgtxt.errors import ModelError
from imgtxt.model import concepts
from imgtxt.model.concepts import ConceptBridge

CONFIG = {"kind": "conse", "top_k": 2, "weight": 0.1, "confidence_weight": 0.2, "raw_slice": [1, 3],
          "classes": 3, "text_dim": 2}


@pytest.fixture()
def tiny_minilm_model(tmp_path):
    """A small random MiniLM joint model on 40-d baseline features (as tests/test_text_encoders.py builds)."""
    torch = pytest.importorskip("torch")
    from test_text_encoders import minilm_config, save_joint, tokenizer_json

    from imgtxt.research.joint_model import JointConfig, JointModel

    torch.manual_seed(1)
    model = JointModel(JointConfig(vocab_size=0, image_dim=40, embed_dim=32, word_dim=0,
                                   text=minilm_config("mlp"))).eval()
    save_joint(tmp_path / "m", model, files={"tokenizer.json": tokenizer_json()})
    return tmp_path / "m"


def bridge(**overrides) -> ConceptBridge:
    tensors = {
        # logits = raw[:, 1:3] @ W.T + b
        concepts.WEIGHT: np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], np.float32),
        concepts.BIAS: np.array([0.0, 0.0, 0.0], np.float32),
        concepts.CLASS_VECTORS: np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], np.float32),
    }
    return ConceptBridge({**CONFIG, **overrides}, tensors)


def test_photo_part_is_the_scaled_convex_combination_of_the_top_classes():
    raw = np.array([[9.0, math.log(3.0), 0.0]], np.float32)   # logits ln 3, 0, 0 -> p = 3/5, 1/5, 1/5
    b = bridge()
    np.testing.assert_allclose(b.class_probabilities(raw), [[0.6, 0.2, 0.2]], rtol=1e-6)
    # top 2: class 0 (0.6) and one of the two 0.2 classes; a tie is broken either way, so make class 1 win it
    raw = np.array([[9.0, math.log(3.0), 0.01]], np.float32)
    p = b.class_probabilities(raw)[0]
    w0, w1 = p[0] / (p[0] + p[1]), p[1] / (p[0] + p[1])
    scale = 0.1 + 0.2 * p[0]
    np.testing.assert_allclose(b.photo_part(raw)[0], [scale * w0, scale * w1], rtol=1e-5)


def test_weights_can_be_overridden_and_zero_turns_the_part_off():
    raw = np.array([[0.0, 2.0, 1.0]], np.float32)
    assert np.all(bridge().photo_part(raw, weight=0.0, confidence_weight=0.0) == 0)
    one = bridge(top_k=1).photo_part(raw, weight=1.0, confidence_weight=0.0)
    np.testing.assert_allclose(one, [[1.0, 0.0]], atol=1e-6)   # the top class's name vector, unscaled


def test_text_part_is_unit_length():
    out = bridge().text_part(np.array([[3.0, 4.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8]])


@pytest.mark.parametrize("bad, says", [
    ({"kind": "other"}, "conse"),
    ({"top_k": 0}, "positive integers"),
    ({"top_k": 4}, "larger than the number of classes"),
    ({"weight": -1}, "non-negative"),
    ({"confidence_weight": float("nan")}, "non-negative"),
    ({"weight": "0.1"}, "non-negative"),
    ({"raw_slice": [3, 1]}, "raw_slice"),
    ({"raw_slice": "1:3"}, "raw_slice"),
])
def test_bad_sections_are_named(bad, says):
    assert says in concepts.check_config({**CONFIG, **bad})


def save_with_bridge(src, out, rng, confidence_weight: float = 0.0, bank=("a dog",), search=None):
    """`src` (a MiniLM model) saved at `out` with a hand-made ConSE bridge of 5 classes, weight 0.2, top 3
    (and model.json "search" when given)."""
    from imgtxt.model import text_encoders
    from imgtxt.model.modelfile import IMAGE_PROJECTION, save_model

    start, stop = src.features["baseline_slice"]
    classes, text_dim = 5, src.text.sentence_vectors([[101, 102]]).shape[1]
    vectors = rng.normal(size=(classes, text_dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    extra = {concepts.WEIGHT: rng.normal(size=(classes, stop - start)).astype(np.float32),
             concepts.BIAS: np.zeros(classes, np.float32), concepts.CLASS_VECTORS: vectors}
    config = {k: v for k, v in src.config.items() if k not in ("format", "version", "weights_sha256")}
    config["concepts"] = {"kind": "conse", "top_k": 3, "weight": 0.2, "confidence_weight": confidence_weight,
                          "raw_slice": [start, stop], "classes": classes, "text_dim": text_dim}
    if search is not None:
        config["search"] = search
    names = text_encoders.tensor_names(text_encoders.text_config_of(config)) + [IMAGE_PROJECTION]
    weights = {n: np.asarray(src.tensors[n], np.float32) for n in names}
    files = {"tokenizer.json": (src.folder / "tokenizer.json").read_bytes()}
    save_model(out, weights, None, config, src.stats, list(bank), files=files, extra=extra)
    return out


def test_a_model_with_the_bridge_appends_both_parts_and_scores_by_dot_product(tiny_minilm_model):
    """A MiniLM model given a hand-made bridge: photo vectors = [joint, ConSE part], text = [joint, sentence];
    one dot product = joint cosine + ConSE score."""
    from imgtxt.model.modelfile import TrainedModel

    src = TrainedModel.load(tiny_minilm_model)
    raw_dim = src.features["raw_dim"]
    rng = np.random.default_rng(0)
    out = save_with_bridge(src, tiny_minilm_model.parent / "with-concepts", rng, confidence_weight=0.1)
    text_dim = src.text.sentence_vectors([[101, 102]]).shape[1]
    start, stop = src.features["baseline_slice"]
    model = TrainedModel.load(out)
    h = model.config["joint"]["embed_dim"]
    assert model.vector_dim == h + text_dim
    raw = rng.normal(size=(4, raw_dim)).astype(np.float32)
    photos = model.encode_raw_images(raw)
    texts = model.encode_text(["a dog", "a red car"])
    np.testing.assert_allclose(photos[:, :h], src.encode_raw_images(raw), atol=1e-6)
    np.testing.assert_allclose(texts[:, :h], src.encode_text(["a dog", "a red car"]), atol=1e-6)
    expected = photos[:, :h] @ texts[:, :h].T + model.concepts.photo_part(raw) @ \
        model.text.encode_with_sentence([model.text.tokenize(t) for t in ["a dog", "a red car"]])[1].T
    np.testing.assert_allclose(model.scores(photos, texts), expected, atol=1e-5)
    # a damaged section or a missing tensor fails at load, in one line
    config_file = out / "model.json"
    saved = json.loads(config_file.read_text())
    saved["concepts"]["raw_slice"] = [start, raw_dim + 5]
    config_file.write_text(json.dumps(saved))
    with pytest.raises(ModelError, match="raw_slice"):
        TrainedModel.load(out)


def test_class_texts_name_and_define_each_class_or_list_its_names(monkeypatch):
    from imgtxt.research.concepts_fit import class_captions, class_texts

    lemmas = [["sorrel"], ["ram", "tup"], ["hog", "pig", "grunter", "squealer"]]
    definitions = ["a horse of a brownish orange to light brown color", "uncastrated adult male sheep",
                   "domestic swine"]
    texts, owner = class_texts(lemmas, definitions)
    assert texts == ["A photo of a sorrel, a horse of a brownish orange to light brown color.",
                     "A photo of a ram, uncastrated adult male sheep.", "A photo of a hog, domestic swine."]
    assert owner == [0, 1, 2]
    assert texts == class_captions(lemmas, definitions)   # the caption-bank lines are the class texts
    assert class_captions([["espresso"]]) == ["A photo of an espresso."]
    texts, owner = class_texts(lemmas, None)   # the names alone: the first of each class
    assert texts == ["a photo of a sorrel", "a photo of a ram", "a photo of a hog"]
    assert owner == [0, 1, 2]
    from imgtxt.research import concepts_fit

    monkeypatch.setattr(concepts_fit, "LEMMAS_PER_CLASS", 2)
    texts, owner = class_texts(lemmas, None)
    assert texts == ["a photo of a sorrel", "a photo of a ram", "a photo of a tup", "a photo of a hog",
                     "a photo of a pig"]
    assert owner == [0, 1, 1, 2, 2]


def test_the_class_definitions_are_timms_wordnet_glosses_in_the_classifiers_order():
    pytest.importorskip("timm")
    from imgtxt.research.concepts_fit import class_definitions, class_lemmas

    definitions, lemmas = class_definitions(), class_lemmas()
    assert len(definitions) == len(lemmas) == 1000 and all(definitions)
    assert lemmas[967][0] == "espresso" and "coffee" in definitions[967]
    assert lemmas[339][0] == "sorrel" and "horse" in definitions[339]
    assert not any(d.startswith(lemma[0] + ":") for d, lemma in zip(definitions, lemmas))   # the gloss alone


def test_class_vectors_average_a_classes_texts(tiny_minilm_model):
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.concepts_fit import class_vectors

    model = TrainedModel.load(tiny_minilm_model)
    lemmas = [["sorrel"], ["ram", "tup"]]
    text = model.text

    def sentence(t):
        return text.encode_with_sentence([text.tokenize(t)])[1][0]

    defined = class_vectors(model, lemmas, ["a brown horse", "a male sheep"])
    want = sentence("A photo of a ram, a male sheep.")
    np.testing.assert_allclose(defined[1], want / np.linalg.norm(want), atol=1e-5)
    named = class_vectors(model, lemmas)
    want = sentence("a photo of a ram")
    np.testing.assert_allclose(named[1], want / np.linalg.norm(want), atol=1e-5)


def test_fusion_rule_gives_conse_the_most_say_within_the_tolerance_by_hand():
    from imgtxt.research.concepts_fit import most_conse_say

    rows = [{"weight": 0.0, "confidence_weight": 0.0, "rsum": 100.0, "mean_scale": 0.0},
            {"weight": 0.1, "confidence_weight": 0.0, "rsum": 101.0, "mean_scale": 0.1},     # the best rsum
            {"weight": 0.2, "confidence_weight": 0.2, "rsum": 100.5, "mean_scale": 0.3},     # at best - 0.5
            {"weight": 0.3, "confidence_weight": 0.0, "rsum": 100.6, "mean_scale": 0.3},     # same say, more rsum
            {"weight": 0.4, "confidence_weight": 0.3, "rsum": 100.4, "mean_scale": 0.55}]    # just out
    chosen = most_conse_say(rows)                                       # the documented tolerance, 0.5
    assert (chosen["weight"], chosen["confidence_weight"]) == (0.3, 0.0)
    chosen = most_conse_say(rows, tolerance=0.6)
    assert (chosen["weight"], chosen["confidence_weight"]) == (0.4, 0.3)
    chosen = most_conse_say(rows, tolerance=0.0)
    assert (chosen["weight"], chosen["confidence_weight"]) == (0.1, 0.0)


def test_choose_weights_on_a_split_where_the_conse_part_changes_nothing():
    """Captions whose ConSE part is zero: every (weight, confidence weight) gives the same val rsum, so the rule
    gives ConSE the most say of the grid; the table's mean scale is weight + confidence_weight x the mean top-1
    probability."""
    from types import SimpleNamespace

    from imgtxt.research.concepts_fit import CONFIDENCE_WEIGHTS, WEIGHTS, choose_weights

    rng = np.random.default_rng(0)
    images = rng.normal(size=(4, 3)).astype(np.float32)
    text = np.concatenate([np.repeat(images, 5, axis=0) + 0.5 * rng.normal(size=(20, 3)), np.zeros((20, 2))], axis=1)
    model = SimpleNamespace(config={"joint": {"embed_dim": 3}}, image_features=lambda raw: raw[:, :3],
                            encode_image_features=lambda x: x,
                            encode_text=lambda captions, bridge: text.astype(np.float32))
    raw = np.concatenate([images, rng.normal(size=(4, 2)).astype(np.float32)], axis=1)   # raw_slice [1, 3]
    b = bridge()
    import inspect

    assert inspect.signature(choose_weights).parameters["tolerance"].default == 0.5
    w, cw, rows = choose_weights(model, b, raw, [""] * 20, log=lambda m: None)
    assert (w, cw) == (max(WEIGHTS), max(CONFIDENCE_WEIGHTS))
    assert len(rows) == len(WEIGHTS) * len(CONFIDENCE_WEIGHTS) and len({r["rsum"] for r in rows}) == 1
    top1 = b.class_probabilities(raw).max(axis=1).mean()
    last = rows[-1]
    assert last["mean_scale"] == pytest.approx(max(WEIGHTS) + max(CONFIDENCE_WEIGHTS) * top1, abs=1e-3)


def test_choose_weights_adds_the_conse_part_that_finds_the_right_photos():
    """No joint signal at all (zero joint scores); the classifier sees class 0 in photos 0 and 2, class 1 in photos
    1 and 3, and each photo's captions name its class. Added to the scores, the ConSE part ranks each photo's
    captions (and its class twin's) first: every (weight, confidence weight) but (0, 0) beats chance by the same
    margin, and the rule takes the most ConSE say."""
    from types import SimpleNamespace

    from imgtxt.research.concepts_fit import CONFIDENCE_WEIGHTS, WEIGHTS, choose_weights

    raw = np.zeros((4, 5), np.float32)
    raw[[0, 2], 1] = 5.0
    raw[[1, 3], 2] = 5.0                                    # logits read from raw[:, 1:3] (raw_slice [1, 3])
    text = np.zeros((20, 5), np.float32)
    text[:, 3:] = np.repeat(np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32), 5, axis=0)
    model = SimpleNamespace(config={"joint": {"embed_dim": 3}}, image_features=lambda r: r[:, :3],
                            encode_image_features=lambda x: x, encode_text=lambda captions, bridge: text)
    w, cw, rows = choose_weights(model, bridge(), raw, [""] * 20, log=lambda m: None)
    none = rows[0]
    assert (none["weight"], none["confidence_weight"]) == (0.0, 0.0)
    assert len({r["rsum"] for r in rows[1:]}) == 1 and rows[1]["rsum"] > none["rsum"] + 50
    assert (w, cw) == (max(WEIGHTS), max(CONFIDENCE_WEIGHTS))


def test_captions_encoded_for_a_bridge_the_model_does_not_have_yet():
    """add-concepts scores a new bridge on a freshly trained model, which has none: the captions' ConSE part must
    be their sentence vectors through that bridge, as the finished model encodes them (it once came out empty,
    and `imgtxt add-concepts` failed on every model without a bridge)."""
    from imgtxt.model.modelfile import TrainedModel, default_model_dir
    from imgtxt.research.concepts_fit import FITTED_ON_TOP

    shipped = TrainedModel.load(default_model_dir())
    bare = TrainedModel.load(default_model_dir())
    for key in (*FITTED_ON_TOP, "concepts"):    # what add_concepts drops, and the bridge itself
        bare.config.pop(key, None)
    assert bare.concepts is None and bare.hubness is None
    captions = ["a dog runs along the beach", "a cup of coffee on a table"]
    h = bare.config["joint"]["embed_dim"]
    assert bare.encode_text(captions).shape == (2, h)
    got = bare.encode_text(captions, bridge=shipped.concepts)
    assert got.shape == (2, shipped.content_dim)
    np.testing.assert_allclose(got, shipped.encode_text(captions)[:, :shipped.content_dim], atol=1e-6)


def test_the_bank_gets_the_class_lines_once_and_each_line_once():
    from imgtxt.research.concepts_fit import bank_with_classes

    bank = ["a dog runs.", "a photo of a cup.", "A photo of a tench.", "a photo of a cup.", "a dog runs."]
    assert bank_with_classes(bank, {"A photo of a tench."}, ["A photo of a goldfish.", "a photo of a cup."]) == \
        ["a dog runs.", "a photo of a cup.", "A photo of a goldfish."]
