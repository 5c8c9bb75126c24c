"""The classifier's prior on the caption bank's class lines: the class weights read back from a ConSE part, the
prior worked out by hand (twin lines sharing), the fit's rule on a small table, and a model carrying it in
`caption` (and refusing a stale one with a notice)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_concepts import save_with_bridge, tiny_minilm_model  # noqa: F401  (a fixture)

from imgtxt.model import caption_prior
from imgtxt.research import caption_prior_fit as fitting

# four independent class-name vectors in 5 dimensions: a convex combination of them has one non-negative reading
CLASS_VECTORS = np.array([[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0.6, 0.8, 0], [0, 0, 0, 0, 1]], np.float32)


def test_class_weights_are_read_back_from_a_conse_part():
    part = 0.25 * (0.5 * CLASS_VECTORS[0] + 0.3 * CLASS_VECTORS[2] + 0.2 * CLASS_VECTORS[3])   # the bridge's weight
    np.testing.assert_allclose(caption_prior.class_weights(part, CLASS_VECTORS), [0.5, 0, 0.3, 0.2], atol=1e-6)
    np.testing.assert_allclose(caption_prior.class_weights(part.astype(np.float16), CLASS_VECTORS),
                               [0.5, 0, 0.3, 0.2], atol=2e-3)   # as an index stores it
    assert caption_prior.class_weights(np.zeros(5), CLASS_VECTORS).tolist() == [0, 0, 0, 0]


def prior(weight=0.1, bias=0.02, first=2):
    lines = ["A photo of a crane.", "A photo of a dog.", "A photo of a crane.", "A photo of a cat."]
    section = {"weight": weight, "bias": bias, "first_line": first, "classes": 4, "captions_sha256": "x"}
    return caption_prior.CaptionPrior(section, lines, CLASS_VECTORS, slice(1, 6))


def test_a_class_line_gains_weight_times_its_classes_q_minus_the_bias_and_twins_share():
    photo = np.concatenate([[0.7], 0.25 * (0.1 * CLASS_VECTORS[0] + 0.6 * CLASS_VECTORS[1] + 0.3 * CLASS_VECTORS[2])])
    # the two cranes share 0.1 + 0.3: 0.1 * 0.4 - 0.02 = 0.02; the dog 0.1 * 0.6 - 0.02 = 0.04; the cat -0.02
    np.testing.assert_allclose(prior().line_prior(photo), [0.02, 0.04, 0.02, -0.02], atol=1e-6)
    scores = np.array([0.5, 0.4, 0.3, 0.3, 0.3, 0.3], np.float32)   # two scene captions, then the class lines
    np.testing.assert_allclose(prior().apply(scores, photo), [0.5, 0.4, 0.32, 0.34, 0.32, 0.28], atol=1e-6)
    np.testing.assert_allclose(prior(0.0, 0.0).apply(scores, photo), scores)


@pytest.mark.parametrize("section, reason", [
    ([], "must be an object"),
    ({"weight": -0.1, "bias": 0, "first_line": 0, "classes": 4, "captions_sha256": "x"}, "weight >= 0"),
    ({"weight": 0.1, "bias": float("nan"), "first_line": 0, "classes": 4, "captions_sha256": "x"}, "bias >= 0"),
    ({"weight": 0.1, "bias": 0, "first_line": "0", "classes": 4, "captions_sha256": "x"}, "integers"),
    ({"weight": 0.1, "bias": 0, "first_line": 0, "classes": 3, "captions_sha256": "x"}, "has 4"),
    ({"weight": 0.1, "bias": 0, "first_line": 0, "classes": 4}, "captions_sha256"),
])
def test_a_bad_section_is_refused_in_one_line(section, reason):
    assert reason in caption_prior.check_config(section, 4)


def test_head_words_and_their_plurals():
    assert fitting.head_word("A photo of a suspension bridge.") == "bridge"
    assert fitting.head_word("A photo of an Egyptian cat.") == "cat"
    assert fitting.head_word("A photo of a bicycle-built-for-two.") == "two"
    words = fitting.words_of(["Two dogs cross a rope bridge .", "Boxes"])
    assert fitting.named_in("bridge", words) and fitting.named_in("dog", words) and fitting.named_in("box", words)
    assert not fitting.named_in("cat", words)


def test_first_right_counts_own_captions_and_named_class_lines():
    # 2 photos, 2 captions each (photo 0 owns 0-1, photo 1 owns 2-3), 2 class lines
    captions = np.array([[0.5, 0.2, 0.6, 0.1],     # photo 0: caption 2 (photo 1's) first -> wrong ...
                         [0.1, 0.2, 0.7, 0.3]])    # photo 1: its own caption 2 first -> right
    ok = np.array([[True, False], [False, False]])
    classes = np.array([[0.65, 0.1], [0.1, 0.75]])  # ... unless class line 0 (named in its captions) beats it
    assert fitting.first_right(captions, classes, ok, per_photo=2).tolist() == [True, False]   # photo 1: unnamed line
    assert fitting.first_right(captions, classes - 0.2, ok, per_photo=2).tolist() == [False, True]


def test_the_fit_takes_the_largest_weight_the_scenes_allow(monkeypatch):
    monkeypatch.setattr(fitting, "WEIGHTS", (0.0, 0.1, 0.2, 0.3))
    # 4 photos, one caption each (its own, 0.5) and one class line, named in the captions of photo 0 only. The
    # classifier is sure for photo 0 (q 1) and half sure for photo 2; not at all for 1 and 3. Fit photos: 0, 2.
    captions = np.zeros((4, 4))
    np.fill_diagonal(captions, 0.5)
    base = np.array([[0.45], [0.48], [0.36], [0.52]])
    q = np.array([[1.0], [0.0], [0.5], [0.0]])
    ok = np.array([[True], [False], [False], [False]])
    chosen, table = fitting.fit_prior(captions, base, q, ok, tolerance=1.0, per_photo=1)
    shares = {r["weight"]: (r["fit"], r["held_out"]) for r in table}
    # photo 0's own caption or its named line is right at every weight; photo 2's unnamed line passes its own
    # caption (0.5) from weight 0.3 (0.36 + 0.15 = 0.51); photo 3's unnamed line 0.52 is always first
    assert shares == {0.0: (100.0, 50.0), 0.1: (100.0, 50.0), 0.2: (100.0, 50.0), 0.3: (50.0, 50.0)}
    assert chosen == {"weight": 0.2, "bias": 0.0}
    # a bias takes photo 3's line below its caption (held out 100%); a veto at the first weight keeps none
    assert fitting.fit_prior(captions, base, q, ok, bias=0.05, per_photo=1)[1][0]["held_out"] == 100.0
    captions[0, 0] = 0.46    # photo 0: its line (0.45 + 0.1 = 0.55) passes its caption from 0.1 on: still right
    assert fitting.fit_prior(captions, base, q, ok, per_photo=1)[0]["weight"] == 0.2
    ok[0, 0] = False         # ... and now wrong: weight 0.1 costs 50 points
    assert fitting.fit_prior(captions, base, q, ok, per_photo=1)[0]["weight"] == 0.0


@pytest.fixture()
def model_with_prior(tiny_minilm_model):  # noqa: F811
    from imgtxt.model.modelfile import TrainedModel

    src = TrainedModel.load(tiny_minilm_model)
    bank = ["two people on a bench", "a child on a swing"] + [f"A photo of a class{j}." for j in range(5)]
    folder = save_with_bridge(src, tiny_minilm_model.parent / "prior", np.random.default_rng(0), bank=bank)
    config = json.loads((folder / "model.json").read_text())
    config["caption_prior"] = {"weight": 5.0, "bias": 1.0, "first_line": 2, "classes": 5,
                               "captions_sha256": caption_prior.file_sha256(folder / "captions.txt")}
    (folder / "model.json").write_text(json.dumps(config))
    return TrainedModel.load(folder), bank


def test_caption_puts_the_class_the_classifier_is_sure_of_first(model_with_prior):
    from imgtxt.library.query import caption

    model, bank = model_with_prior
    h, d = model.config["joint"]["embed_dim"], model.content_dim
    vector = np.zeros(model.vector_dim, np.float32)
    vector[:h] = np.random.default_rng(3).normal(size=h) / np.sqrt(h)
    vector[h:d] = 0.2 * model.concepts.class_vectors[3]          # the classifier: class 3, q = 1
    plain = model.encode_text(bank)[:, :d] @ vector[:d]
    expected = plain + np.array([0, 0, -1, -1, -1, 4, -1])     # 5 * q - 1 on the class lines
    notices = []
    hits = caption(model, vector, n=7, notices=notices)
    assert not notices and hits[0].value == "A photo of a class3."
    assert [h.value for h in hits] == [bank[i] for i in np.argsort(-expected, kind="stable")]
    np.testing.assert_allclose([h.score for h in hits], np.sort(expected)[::-1], atol=1e-4)
    # a caption list of one's own has no class lines: plain scores
    own = caption(model, vector, n=2, captions=bank[:2])
    np.testing.assert_allclose(sorted(h.score for h in own), sorted(plain[:2]), atol=1e-4)


def test_a_stale_prior_is_refused_with_a_notice(model_with_prior):
    from imgtxt.library.query import caption
    from imgtxt.model.modelfile import TrainedModel

    model, bank = model_with_prior
    (model.folder / "captions.txt").write_text("\n".join(bank + ["a new line"]) + "\n")
    model = TrainedModel.load(model.folder)
    vector = np.zeros(model.vector_dim, np.float32)
    vector[model.config["joint"]["embed_dim"]:model.content_dim] = 0.2 * model.concepts.class_vectors[3]
    notices = []
    caption(model, vector, n=3, notices=notices)
    assert len(notices) == 1 and "stale" in notices[0] and "without the classifier's prior" in notices[0]


def test_without_scipy_the_prior_is_left_out_with_a_notice(model_with_prior, monkeypatch):
    import sys

    from imgtxt.model import caption_prior as module

    model, bank = model_with_prior
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)   # import fails as if scipy were not installed
    notices = []
    assert module.load(model, bank, notices) is None
    assert len(notices) == 1 and "needs scipy" in notices[0]


def test_the_command_refuses_test_then_dry_runs_then_writes(model_with_prior, tmp_path, monkeypatch):
    """The command end to end, its fit stubbed (the fit's rule: test_the_fit_takes_the_largest_weight_...)."""
    from click.testing import CliRunner

    from imgtxt.cli.main import app

    model, bank = model_with_prior
    config = json.loads((model.folder / "model.json").read_text())
    config.pop("caption_prior")
    (model.folder / "model.json").write_text(json.dumps(config))
    seen = {}

    def fit(loaded, dataset, folder, split, bias, quiet):
        seen["bias"] = bias
        section = {"weight": 0.15, "bias": bias, "first_line": 2, "classes": 5,
                   "captions_sha256": caption_prior.file_sha256(loaded.folder / "captions.txt"),
                   "fitted_on": {"split": split}}
        return section, [{"weight": 0.15, "bias": bias, "fit": 35.8, "held_out": 36.6}]

    monkeypatch.setattr(fitting, "tune_caption_prior", fit)
    (tmp_path / "data").mkdir()
    args = ["tune-caption-prior", str(model.folder), "--data-dir", str(tmp_path / "data")]
    runner = CliRunner()
    refused = runner.invoke(app, args + ["--split", "test"])
    assert refused.exit_code != 0 and "held out" in refused.stderr
    dry = runner.invoke(app, args + ["--dry-run", "--bias", "0.02"])
    assert dry.exit_code == 0, dry.stderr
    assert "first caption right 35.8% (held out 36.6%)" in dry.stdout and seen["bias"] == 0.02
    assert "caption_prior" not in json.loads((model.folder / "model.json").read_text())
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.stderr
    from imgtxt.model.modelfile import TrainedModel

    written = TrainedModel.load(model.folder)
    assert written.config["caption_prior"]["weight"] == 0.15 and written.config["caption_prior"]["bias"] == 0.0
    notices = []
    assert caption_prior.load(written, bank, notices).weight == 0.15 and not notices
