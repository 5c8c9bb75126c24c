"""The 2016 thesis's text models: vectorisers, the single-negative loss, numpy == torch, save/load."""
import math

import numpy as np
import pytest
import torch

from imgtxt.model.text_encoders import bow, prepare
from imgtxt.research.losses import same_image_mask, single_negative_loss


def test_words_drop_articles_and_punctuation():
    assert bow.words("A dog, the CAT and an owl!") == ["dog", "cat", "and", "owl"]
    assert bow.ngrams("a red dog runs", "bi") == ["red", "dog", "runs", "red_dog", "dog_runs"]
    assert bow.ngrams("red dog runs far", "skip") == ["red", "dog", "runs", "far", "red_dog", "dog_runs",
                                                      "runs_far", "red_dog_runs", "dog_runs_far",
                                                      "red__runs", "dog__far"]
    assert bow.ngrams("red dog runs", "tri") == ["red", "dog", "runs", "red_dog", "dog_runs", "red_dog_runs"]


def test_vectoriser_names_a_wrong_kind_or_weighting():
    idf = np.ones(2, np.float32)
    for kind, weighting in (("quad", "binary"), ("uni", "bm25")):
        with pytest.raises(ValueError, match=r"^n-grams must be one of \['uni', 'bi', 'tri', 'skip'\] and "
                                             r"weighting binary or tfidf$"):
            bow.Vectorizer(kind, weighting, [], idf)
    for doc in ({"kind": "uni", "weighting": "binary", "terms": "dog"}, {"terms": [1]}, ["dog"]):
        with pytest.raises(ValueError, match=r"^m/bow_terms.json: not a bag-of-words vocabulary \(kind, weighting "
                                             r"and a list of terms\)$"):
            bow.Vectorizer.from_doc(doc, idf, "m/bow_terms.json")


def test_token_weights_are_zero_on_padding():
    idf = np.array([1, 1, 0.5, 2], np.float32)
    tokens, lengths = np.array([[2, 3, 0], [3, 0, 0]]), np.array([2, 1])
    np.testing.assert_array_equal(bow.token_weights(tokens, lengths, idf, "binary"), [[1, 1, 0], [1, 0, 0]])
    # tf-idf: idf / |d| per occurrence
    np.testing.assert_allclose(bow.token_weights(tokens, lengths, idf, "tfidf"), [[0.25, 1, 0], [2, 0, 0]])


def test_vectoriser_vocabulary_binary_and_tfidf():
    caps = ["dog dog runs", "dog sits", "cat sits"]
    vec = bow.Vectorizer.fit(caps, "uni", "tfidf", max_features=3)
    assert vec.terms == ["dog", "sits", "cat"]             # by frequency, then alphabetically; "runs" cut
    assert vec.idf[2] == pytest.approx(math.log(3 / 2))    # df(dog) = 2 of 3 captions
    ids = vec.ids("dog dog runs")
    assert ids == [2, 2]                                    # each occurrence (tf), unknown words dropped
    weights = bow.token_weights(np.array([ids]), np.array([2]), vec.idf, "tfidf")
    # tf-idf(dog) = count / |d| * idf = 2/2 * log(3/2): the two occurrences' weights sum to it
    assert weights.sum() == pytest.approx(math.log(3 / 2))
    binary = bow.Vectorizer.fit(caps, "uni", "binary")
    assert binary.ids("dog dog runs") == [2, 5] and binary.ids("zebra") == [1]


def test_single_negative_loss_by_hand():
    scores = torch.tensor([[0.9, 0.5], [0.3, 0.6]])
    # B = 2: the only negative of pair 0 is 1 and vice versa
    # i2t: pair 0: .15 - .9 + .5 = -.25 -> 0; pair 1: .15 - .6 + .3 = -.15 -> 0
    assert single_negative_loss(scores, 0.15, "i2t") == 0
    # t2i: pair 0: .15 - .9 + .3 -> 0; pair 1: .15 - .6 + .5 = .05
    assert torch.isclose(single_negative_loss(scores, 0.15, "t2i"), torch.tensor(0.05))
    assert torch.isclose(single_negative_loss(scores, 0.15, "both"), torch.tensor(0.05))
    assert single_negative_loss(scores, 0.15, "t2i", also_positive=same_image_mask([4, 4])) == 0
    # one negative per pair, never the pair itself: on a 3x3 matrix with a huge diagonal the loss is 0
    big = torch.eye(3) * 10
    assert single_negative_loss(big, 0.15, "both") == 0
    with pytest.raises(ValueError, match=r"^negatives must be one of \('i2t', 't2i', 'both'\), not 'x'$"):
        single_negative_loss(scores, 0.15, "x")


def test_single_negative_loss_each_direction_by_hand():
    # B = 2, so each pair's one negative is the other pair; margin .15
    scores = torch.tensor([[0.5, 0.6], [0.2, 0.4]])
    # i2t (swap the caption, s[k, j]): pair 0: .15 - .5 + .6 = .25; pair 1: .15 - .4 + .2 -> 0
    assert torch.isclose(single_negative_loss(scores, 0.15, "i2t"), torch.tensor(0.25))
    # t2i (swap the image, s[j, k]): pair 0: .15 - .5 + .2 -> 0; pair 1: .15 - .4 + .6 = .35
    assert torch.isclose(single_negative_loss(scores, 0.15, "t2i"), torch.tensor(0.35))
    assert torch.isclose(single_negative_loss(scores, 0.15, "both"), torch.tensor(0.60))
    # two captions of one image: neither is the other's negative, in either direction
    same = same_image_mask([4, 4])
    for negatives in ("i2t", "t2i", "both"):
        assert single_negative_loss(scores, 0.15, negatives, also_positive=same) == 0


CAPS = ["a red dog runs", "the blue cat sits", "red cat", "a dog on grass", "blue dog runs on grass"]


@pytest.mark.parametrize("kind,options", [
    ("bow", {"ngrams": "uni", "weighting": "binary", "hidden": 0}),
    ("bow", {"ngrams": "skip", "weighting": "tfidf", "hidden": 7}),
    ("sse", {"word_dim": 6, "window": 5}),
    ("sse", {"word_dim": 6, "window": 2}),
    ("sse", {"word_dim": 6, "window": 3, "kernels": 5, "top": False}),
])
def test_numpy_equals_torch(tmp_path, kind, options):
    from imgtxt.model.text_encoders import runtime
    from imgtxt.research.text_modules import torch_encoder
    setup = prepare(kind, CAPS, options)
    torch.manual_seed(0)
    enc = torch_encoder(setup.config, 9).eval()
    if setup.init_tensors:
        enc.import_tensors(setup.init_tensors, pretrained_only=True)
    for name, data in setup.files.items():
        (tmp_path / name).write_bytes(data)
    tensors = {k: v.detach().numpy() for k, v in enc.export_tensors().items()}
    rt = runtime(setup.config, tensors, tmp_path)
    texts = ["a red dog runs on grass", "cat", "zebra", ""]
    from imgtxt.research.joint_model import pad_batch
    tokens = [setup.tokenize(t) for t in texts]
    assert tokens == [rt.tokenize(t) for t in texts]
    with torch.no_grad():
        expected = enc(*pad_batch(tokens)).numpy()
    np.testing.assert_allclose(rt.encode(tokens), expected, atol=1e-5)
    assert rt.check_query("zebra") and rt.check_query("red dog") is None


# SSE's deeper text side does not leave chance in 6 toy epochs of plain SGD; it trains with Adam here.
@pytest.mark.parametrize("kind,optimizer,lr", [("bow", "sgd", 0.1), ("sse", "adam", 1e-2)])
def test_thesis_model_trains_saves_loads(tmp_path, kind, optimizer, lr):
    from test_model import feature_config, synthetic

    from imgtxt.model.fne import FeatureStats
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.checkpoints import load_weights
    from imgtxt.research.joint_model import JointConfig, JointModel
    from imgtxt.research.metrics import evaluate_scores
    from imgtxt.research.train import TrainData, preset, train, with_learning_rates

    feats, caps = synthetic(0)
    setup = prepare(kind, caps, {"ngrams": "bi", "weighting": "tfidf", "hidden": 16, "word_dim": 8})
    tokens = [setup.tokenize(c) for c in caps]
    data = TrainData(feats, tokens, feats, tokens, None, caps, feature_config(48),
                     FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32)), text_setup=setup)
    # The thesis recipe (SGD, image hidden layer, affine map) at a toy scale; with_learning_rates copies the phases,
    # so the THESIS preset keeps its lr for the tests after this one.
    cfg = with_learning_rates(preset("THESIS", embed_dim=16, image_hidden=24, batch_size=32, max_epochs=6, patience=9,
                                     negatives="both", optimizer=optimizer), lr=lr)
    best = train(tmp_path / "run", data, cfg)
    assert best["rsum"] > 150, best["val"]       # chance ~50
    model = TrainedModel.load(tmp_path / "run" / "best")
    scores = model.scores(model.encode_image_features(feats), model.encode_text(caps))
    assert evaluate_scores(scores)["rsum"] == pytest.approx(best["rsum"], abs=5.0)   # fp16 weights
    # the numpy image side (hidden ReLU layer, affine map) equals torch's on the saved weights
    joint = JointModel(JointConfig(**model.config["joint"])).eval()
    load_weights(joint, tmp_path / "run" / "best")
    with torch.no_grad():
        expected = joint.image(torch.from_numpy(feats)).numpy()
    np.testing.assert_allclose(model.encode_image_features(feats), expected, atol=1e-5)


def test_bow_first_layer_starts_glorot_uniform_with_a_zero_padding_row():
    from imgtxt.research.text_modules.bow import Encoder
    torch.manual_seed(0)
    for hidden, first in ((7, 7), (0, 9)):          # with the hidden layer it is the first layer; without, the map
        enc = Encoder({"features": 40, "weighting": "binary", "hidden": hidden}, 9)
        w, r = enc.first.weight.detach(), (6.0 / (40 + first)) ** 0.5
        assert w.shape == (40, first) and w[0].abs().sum() == 0      # id 0 pads
        rest = w[1:]                                                   # id 1 ("nothing known") is an input too
        assert rest[0].abs().sum() > 0
        assert -r <= rest.min() < -0.9 * r and 0.9 * r < rest.max() <= r


def test_sse_word_vectors_kernels_and_padding():
    from imgtxt.research.text_modules.sse import Encoder
    torch.manual_seed(0)
    enc = Encoder({"vocab_size": 30, "word_dim": 6, "window": 3, "kernels": 7, "top": True}, 9)
    assert enc.conv.out_channels == 7 and (enc.top.in_features, enc.top.out_features) == (7, 9)
    w = enc.embed.weight
    assert w[0].abs().sum() == 0                     # id 0 pads: the zero vector the convolution's padding is
    assert -0.1 <= w[1:].min() < -0.09 and 0.09 < w[1:].max() <= 0.1
    # the unknown word (id 1) is trained; the padding row never is, so it stays the zero padding
    enc(torch.tensor([[1, 4, 0], [5, 6, 7]]), torch.tensor([2, 3])).sum().backward()
    assert w.grad[0].abs().sum() == 0 and w.grad[1].abs().sum() > 0


def _bigram_run(tmp_path, name, optimizer="sgd", **train_options):
    from test_model import feature_config, synthetic

    from imgtxt.model.fne import FeatureStats
    from imgtxt.research.train import TrainData, preset, train, with_learning_rates

    feats, caps = synthetic(0)
    setup = prepare("bow", caps, {"ngrams": "bi", "weighting": "binary", "hidden": 16})
    tokens = [setup.tokenize(c) for c in caps]
    data = TrainData(feats, tokens, feats, tokens, None, caps, feature_config(48),
                     FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32)), text_setup=setup)
    cfg = with_learning_rates(preset("THESIS", embed_dim=16, image_hidden=24, batch_size=32, max_epochs=3, patience=9,
                                     optimizer=optimizer), lr=0.1)
    train(tmp_path / name, data, cfg, **train_options)
    return torch.load(tmp_path / name / "state.pt", weights_only=False)["model"]


def test_sparse_gradients_train_the_same_weights_as_dense(monkeypatch, tmp_path):
    import imgtxt.research.train as train_module
    start = {}
    real = train_module.use_sparse_gradients

    def keep_start(model, cfg):   # the untrained first layer, to show that training moved it
        start["first"] = model.text.encoder.first.weight.detach().clone()
        real(model, cfg)

    monkeypatch.setattr(train_module, "use_sparse_gradients", keep_start)
    sparse = _bigram_run(tmp_path, "sparse", sparse_gradients=True)
    dense = _bigram_run(tmp_path, "dense", sparse_gradients=False)
    assert dense.keys() == sparse.keys()
    for name in dense:
        torch.testing.assert_close(sparse[name], dense[name], atol=1e-5, rtol=1e-5, msg=name)
    moved = (dense["text.encoder.first.weight"] - start["first"]).abs().amax(dim=1)
    assert moved[0] == 0 and (moved > 1e-3).sum() > 20     # padding stays, the used rows trained


def test_sparse_gradients_are_on_with_sgd_only(monkeypatch, tmp_path):
    import imgtxt.research.train as train_module
    from imgtxt.research.joint_model import JointConfig, JointModel
    from imgtxt.research.train import preset, use_sparse_gradients

    calls = []
    monkeypatch.setattr(train_module, "use_sparse_gradients", lambda model, cfg: calls.append(cfg.optimizer))
    _bigram_run(tmp_path, "sgd")
    _bigram_run(tmp_path, "adam", optimizer="adam")
    assert calls == ["sgd"]
    monkeypatch.undo()

    setup = prepare("bow", CAPS, {"ngrams": "bi", "weighting": "binary", "hidden": 7})
    model = JointModel(JointConfig(vocab_size=0, image_dim=5, word_dim=0, embed_dim=4, text=setup.config))
    use_sparse_gradients(model, preset("THESIS"))
    tokens = torch.tensor([setup.tokenize(CAPS[0])])
    model.text(tokens, torch.tensor([tokens.shape[1]])).sum().backward()
    grad = model.text.encoder.first.weight.grad
    assert grad.is_sparse
    assert set(grad.coalesce().indices()[0].tolist()) == set(tokens[0].tolist())   # only the rows used
    with pytest.raises(ValueError, match="plain SGD"):
        use_sparse_gradients(model, preset("THESIS", optimizer="adam"))


def test_image_hidden_option_turns_the_thesis_image_layer_off(tmp_path, monkeypatch):
    """`--image-hidden 0` gives the thesis's shallow model its linear image side (§6.5: "the small trainable visual
    network also does not contain any hidden layer"); without it the THESIS preset keeps its 1,000 units."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    from imgtxt.cli.main import app
    from imgtxt.research import pipeline
    from imgtxt.research import train as train_module

    seen = []
    data = SimpleNamespace(text_setup=SimpleNamespace(description="stub"), vocab=None, extra={},
                           train_features=np.zeros((2, 3)))
    monkeypatch.setattr(pipeline, "build_training_data", lambda *args, **kwargs: data)
    monkeypatch.setattr(train_module, "train", lambda run_dir, data, cfg, init_from=None: seen.append(cfg) or {})
    (tmp_path / "d").mkdir()
    base = ["train", "flickr8k", "--data-dir", str(tmp_path / "d"), "--preset", "THESIS", "--text-encoder", "bow",
            "--run-dir", str(tmp_path / "run")]
    runner = CliRunner()
    assert runner.invoke(app, base + ["--image-hidden", "0"]).exit_code == 0
    assert runner.invoke(app, base).exit_code == 0
    assert [(c.image_hidden, c.image_bias) for c in seen] == [(0, True), (1000, True)]
    refused = runner.invoke(app, base + ["--image-hidden", "-1"])
    assert refused.exit_code != 0 and "--image-hidden must be a size >= 0" in refused.stderr and len(seen) == 2
