"""The frozen text layers' output kept on disk across training runs: a hit gives the very tensors a fresh
computation gives; any change to the frozen weights, the captions or the number of frozen layers misses."""
import pytest
import torch
from test_text_encoders import minilm_config  # noqa: E402

from imgtxt.research.joint_model import JointConfig, JointModel
from imgtxt.research.train import TextInputs

TOKENS = [[101, 1037, 3899, 102], [101, 1037, 4937, 2006, 1996, 2754, 102], [101, 102], [101, 2048, 2273, 102]]


def _model(trainable: int, seed: int = 0) -> JointModel:
    torch.manual_seed(seed)
    config = {**minilm_config("linear", hidden=0), "trainable_layers": trainable}
    return JointModel(JointConfig(vocab_size=0, image_dim=16, embed_dim=8, text=config)).eval()


def _never(*args, **kwargs):
    raise AssertionError("the frozen layers ran although their output was cached")


@pytest.mark.parametrize("trainable", [0, 1])   # pooled vectors (stacked) / per-token states (ragged)
def test_cache_hit_equals_a_fresh_computation(tmp_path, monkeypatch, trainable):
    model = _model(trainable)
    fresh = TextInputs(model, TOKENS, "cpu", cache_dir=tmp_path)
    assert not fresh.from_cache and len(list(tmp_path.glob("*.pt"))) == 1
    monkeypatch.setattr(model.text, "frozen_prefix", _never)
    cached = TextInputs(model, TOKENS, "cpu", cache_dir=tmp_path)
    assert cached.from_cache
    with torch.no_grad():
        assert torch.equal(cached.encode([0, 1, 2, 3]), fresh.encode([0, 1, 2, 3]))


def test_changed_weights_captions_or_frozen_depth_miss(tmp_path):
    TextInputs(_model(1), TOKENS, "cpu", cache_dir=tmp_path)
    assert TextInputs(_model(1), TOKENS, "cpu", cache_dir=tmp_path).from_cache
    assert not TextInputs(_model(1), TOKENS[:3] + [[101, 2048, 102]], "cpu", cache_dir=tmp_path).from_cache
    assert not TextInputs(_model(0), TOKENS, "cpu", cache_dir=tmp_path).from_cache
    changed = _model(1)
    with torch.no_grad():
        changed.text.encoder.word.weight[1037, 0] += 1e-3          # one frozen number
    assert not TextInputs(changed, TOKENS, "cpu", cache_dir=tmp_path).from_cache
    trained_only = _model(1)
    with torch.no_grad():                                 # the trainable top layer is not part of the key
        next(trained_only.text.encoder.layers[-1].parameters()).add_(1.0)
    assert TextInputs(trained_only, TOKENS, "cpu", cache_dir=tmp_path).from_cache


def test_unreadable_cache_file_is_recomputed(tmp_path):
    first = TextInputs(_model(0), TOKENS, "cpu", cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.pt")
    path.write_bytes(b"not a torch file")
    again = TextInputs(_model(0), TOKENS, "cpu", cache_dir=tmp_path)
    assert not again.from_cache and torch.equal(again.prefix, first.prefix)
    assert TextInputs(_model(0), TOKENS, "cpu", cache_dir=tmp_path).from_cache   # rewritten
