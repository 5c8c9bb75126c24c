"""Joint model: save/load round trip, numpy runtime equal to torch, tiny training beats chance."""
import numpy as np
import pytest
import torch

from imgtxt.model.fne import FeatureStats
from imgtxt.model.modelfile import ModelError, TrainedModel, save_model
from imgtxt.model.vocab import Vocabulary
from imgtxt.research.joint_model import JointConfig, JointModel, pad_batch
from imgtxt.research.train import Phase, TrainConfig, TrainData, train

COLORS = ["red", "blue", "green", "black", "white", "brown", "pink", "grey"]
ANIMALS = ["dog", "cat", "horse", "bird", "cow", "goat", "duck", "sheep"]
TEMPLATES = ["a {c} {a}", "the {c} {a} runs .", "a {a} that is {c}", "one {c} {a} on grass", "{c} {a}"]


def synthetic(seed: int):
    """One image per (colour, animal); features = noisy one-hots, discretized like an FNE."""
    rng = np.random.default_rng(seed)
    feats, captions = [], []
    for ci, c in enumerate(COLORS):
        for ai, a in enumerate(ANIMALS):
            x = rng.normal(0, 0.1, 48)
            x[ci] += 2.0
            x[8 + ai] += 2.0
            feats.append(np.where(x > 0.15, 1, np.where(x < -0.25, -1, 0)).astype(np.int8))
            captions += [t.format(c=c, a=a) for t in TEMPLATES]
    return np.stack(feats), captions


def feature_config(dim):
    return {"kind": "fne", "backbone": "efficientnet_lite0", "backbone_id": "efficientnet_lite0@random",
            "layer_set": "all", "crops": 1, "precision": "fp32", "raw_dim": dim,
            "baseline_slice": [0, dim], "low_cut": -0.25, "high_cut": 0.15}


@pytest.mark.parametrize("similarity", ["cosine", "order"])
def test_numpy_runtime_matches_torch_after_save_and_load(tmp_path, similarity):
    torch.manual_seed(0)
    vocab = Vocabulary(["a", "dog", "runs", "on", "the", "beach", "."])
    model = JointModel(JointConfig(vocab_size=len(vocab), image_dim=48, word_dim=16, embed_dim=24,
                                   similarity=similarity, use_abs=similarity == "order")).eval()
    # fp16 storage: round the weights first so both sides use the same numbers
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    weights = {k: v.detach().numpy() for k, v in model.export_tensors().items()}
    stats = FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32))
    save_model(tmp_path / "m", weights, vocab, {"joint": model.config.to_dict(), "features": feature_config(48)},
               stats, ["a dog runs"])
    loaded = TrainedModel.load(tmp_path / "m")
    texts = ["a dog runs on the beach .", "the dog", "unknownword dog", ""]
    with torch.no_grad():
        expected = model.text(*pad_batch([vocab.encode(t) for t in texts])).numpy()
        raw = np.random.default_rng(0).normal(0, 1, (3, 48)).astype(np.float32)
        expected_im = model.image(torch.from_numpy(loaded.image_features(raw))).numpy()
    np.testing.assert_allclose(loaded.encode_text(texts), expected, atol=1e-5)
    np.testing.assert_allclose(loaded.encode_raw_images(raw), expected_im, atol=1e-5)
    with torch.no_grad():
        torch_scores = model.similarity(torch.from_numpy(expected_im), torch.from_numpy(expected)).numpy()
    np.testing.assert_allclose(loaded.scores(expected_im, expected), torch_scores, atol=1e-5)
    assert loaded.caption_bank() == ["a dog runs"]
    # the same weights give the same model id; other weights another one
    assert TrainedModel.load(tmp_path / "m").model_id == loaded.model_id


def test_broken_model_folders_are_clear_errors(tmp_path):
    with pytest.raises(ModelError, match="no such model folder"):
        TrainedModel.load(tmp_path / "nope")
    (tmp_path / "m").mkdir()
    with pytest.raises(ModelError, match="no model.json"):
        TrainedModel.load(tmp_path / "m")
    (tmp_path / "m" / "model.json").write_text('{"format": "imgtxt-model", "version": 99}')
    with pytest.raises(ModelError, match="newer"):
        TrainedModel.load(tmp_path / "m")
    (tmp_path / "m" / "model.json").write_text('{"format": "imgtxt-model", "version": 1, "joint": {}, "features": {}}')
    (tmp_path / "m" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelError, match="unreadable"):
        TrainedModel.load(tmp_path / "m")


def test_tiny_training_run_beats_chance_by_far(tmp_path):
    train_feats, train_caps = synthetic(0)
    val_feats, val_caps = synthetic(1)
    vocab = Vocabulary.build(train_caps, min_count=1)
    data = TrainData(train_feats, [vocab.encode(c) for c in train_caps], val_feats,
                     [vocab.encode(c) for c in val_caps], vocab, train_caps, feature_config(48),
                     FeatureStats(np.zeros(48, np.float32), np.ones(48, np.float32)))
    cfg = TrainConfig([Phase("sum", 3e-3), Phase("max", 1e-3)], word_dim=32, embed_dim=64, batch_size=32,
                      max_epochs=12, patience=12, captions_per_image="all", seed=0)
    best = train(tmp_path / "run", data, cfg)
    # chance: R@1 = 1/64 (1.6%), rsum ~ 2 * (1.6 + 7.8 + 15.6) = 50
    assert best["rsum"] > 400, best["val"]
    assert best["val"]["t2i"]["r1"] > 50 and best["val"]["i2t"]["r1"] > 50
    model = TrainedModel.load(tmp_path / "run" / "best")
    scores = model.scores(model.encode_image_features(val_feats), model.encode_text(val_caps))
    from imgtxt.research.metrics import evaluate_scores
    assert evaluate_scores(scores)["rsum"] == pytest.approx(best["rsum"], abs=3.0)  # fp16 weights


def test_training_resumes_from_its_state(tmp_path):
    train_feats, train_caps = synthetic(0)
    vocab = Vocabulary.build(train_caps, min_count=1)
    tokens = [vocab.encode(c) for c in train_caps]
    data = TrainData(train_feats, tokens, train_feats, tokens, vocab, train_caps, feature_config(48))
    cfg = TrainConfig([Phase("sum", 3e-3)], word_dim=8, embed_dim=16, batch_size=16, max_epochs=4, patience=99)
    train(tmp_path / "full", data, cfg)
    cfg_two = TrainConfig([Phase("sum", 3e-3)], word_dim=8, embed_dim=16, batch_size=16, max_epochs=2, patience=99)
    train(tmp_path / "split", data, cfg_two)
    # continue the finished 2-epoch run with a 4-epoch budget: the state file carries model, optimizer and RNG
    train(tmp_path / "split", data, cfg)
    full = [l for l in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    split = [l for l in (tmp_path / "split" / "log.jsonl").read_text().splitlines()]
    import json
    assert [json.loads(l)["val"]["rsum"] for l in full] == pytest.approx([json.loads(l)["val"]["rsum"] for l in split])
