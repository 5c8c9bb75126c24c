"""Hostile model folders: every one is refused with one ModelError line when the model loads (or, for the files a
query alone reads, at the first query), never a traceback from json, numpy or the tokenizer; weights changed under
an unchanged model.json are refused; the text encoders' vocabularies are read with a bound and checked."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from imgtxt.model.modelfile import ModelError, TrainedModel
from imgtxt.paths import default_model_dir

COPIED = ("model.json", "tokenizer.json", "captions.txt", "vocab.json")


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


def model_copy(src, dst):
    """The small files copied, the weights linked (never written through: the shipped model stays intact)."""
    dst.mkdir()
    for path in src.iterdir():
        if path.name in COPIED:
            shutil.copy2(path, dst / path.name)
        elif path.is_file():
            os.symlink(path, dst / path.name)
    return dst


def edit_json(folder, change):
    config = json.loads((folder / "model.json").read_text())
    change(config)
    (folder / "model.json").write_text(json.dumps(config))


def refused(folder, match: str) -> str:
    with pytest.raises(ModelError, match=match) as caught:
        model = TrainedModel.load(folder)
        model.check_query("a dog on a beach")   # the files only a query reads
    assert one_line(str(caught.value)), str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("name, raw, match", [
    ("huge-number", lambda text: text.replace('"crops": 1', '"crops": 1' + "0" * 5000), "not valid JSON"),
    ("deep", lambda text: text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ("latin-1", lambda text: text.replace('"name": "tiny"', '"name": "caf\xe9"'), "not UTF-8"),
])
def test_a_hostile_model_json_is_one_line(tiny_model_dir, tmp_path, name, raw, match):
    folder = model_copy(tiny_model_dir, tmp_path / name)
    text = (folder / "model.json").read_text()
    data = raw(text)
    (folder / "model.json").write_bytes(data.encode("latin-1") if name == "latin-1" else data.encode())
    refused(folder, match)


@pytest.mark.parametrize("name, change, match", [
    ("layer-set", lambda c: c["features"].update(layer_set="x"), "features.layer_set must be all"),
    ("blocks", lambda c: c["features"].update(layer_set="blocks", backbone="vgg16"), "features.layer_set"),
    ("crops", lambda c: c["features"].update(crops=3), "features.crops must be 1 or 10"),
    ("precision", lambda c: c["features"].update(precision=[]), "features.precision"),
    ("sha", lambda c: c.update(weights_sha256="../x"), "weights_sha256 must be 64 hex digits"),
])
def test_invalid_feature_settings_are_refused_at_load(tiny_model_dir, tmp_path, name, change, match):
    folder = model_copy(tiny_model_dir, tmp_path / name)
    edit_json(folder, change)
    refused(folder, match)


@pytest.mark.parametrize("key, value, match", [
    ("max_length", -1, "text.max_length must be an integer from 3"),
    ("max_length", "128", "text.max_length must be an integer from 3"),
    ("max_length", 100_000, "text.max_length must be an integer from 3"),
    ("heads", 7, "text.heads must divide text.hidden"),
    ("heads", 0, "text.heads must be an integer of at least 1"),
    ("layer_norm_eps", "x", "text.layer_norm_eps must be a positive number"),
    ("layers", None, "text.layers must be"),
    ("kind", "transformer-xl", "unknown text encoder"),
    ("pooling", "max", "text.pooling must be mean"),
    ("layers", 3, "text.layers 3, but the weights hold more layers"),
])
def test_invalid_text_settings_are_refused_at_load(tmp_path, key, value, match):
    folder = model_copy(default_model_dir(), tmp_path / "m")
    edit_json(folder, lambda c: c["text"].update({key: value}))
    with pytest.raises(ModelError, match=match) as caught:
        TrainedModel.load(folder)
    assert one_line(str(caught.value))


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"model": 3}'])
def test_a_broken_tokenizer_is_one_line(tmp_path, content):
    folder = model_copy(default_model_dir(), tmp_path / "m")
    (folder / "tokenizer.json").write_bytes(content)
    refused(folder, "tokenizer.json")


def test_a_negative_token_id_is_refused(tmp_path):
    folder = model_copy(default_model_dir(), tmp_path / "m")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["dog"] = -5              # "a dog" would read row -5: another word
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    refused(folder, "negative token id")


def test_token_ids_beyond_the_embedding_table_are_refused(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = model_copy(default_model_dir(), tmp_path / "m")
    tensors = load_file(str(default_model_dir() / "model.safetensors"))
    name = "minilm.embeddings.word_embeddings.weight"
    tensors[name] = tensors[name][:1000]
    if name + ".scale" in tensors:   # int8 rows carry their scales
        tensors[name + ".scale"] = tensors[name + ".scale"][:1000]
    (folder / "model.safetensors").unlink()
    save_file(tensors, str(folder / "model.safetensors"))
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    edit_json(folder, lambda c: c.update(weights_sha256=digest))
    refused(folder, "tokens, the embedding table 1000 rows")


def test_weights_changed_under_an_unchanged_model_json_are_refused(tiny_model_dir, tmp_path, monkeypatch):
    from imgtxt.model import model_config

    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    hashed = []
    real = model_config.hashlib.sha256
    # the weights are hashed in chunks (sha256() then update); the model id's small digests are made in one call
    monkeypatch.setattr(model_config.hashlib, "sha256", lambda *a: (None if a else hashed.append(1)) or real(*a))
    first = TrainedModel.load(folder).model_id
    assert TrainedModel.load(folder).model_id == first and len(hashed) == 1   # hashed once per change of the file
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF                                                          # same size, other weights
    (folder / "model.safetensors").write_bytes(bytes(data))
    refused(folder, "weights differ from the weights_sha256")


def test_a_latin_1_caption_bank_is_one_line(tiny_model_dir, tmp_path, library):
    from conftest import write_photo

    folder = model_copy(tiny_model_dir, tmp_path / "m")
    (folder / "captions.txt").write_bytes("un caf\xe9\n".encode("latin-1"))
    photo = write_photo(tmp_path / "a.jpg", seed=1)
    result = library.run("caption", photo, "--model", folder, ok=False)
    assert result.exit_code == 1 and one_line(result.stderr) and "UTF-8" in result.stderr, result.stderr


def thesis_model(folder, kind: str, facts: dict):
    """A small SSE or bag-of-words model folder (random weights): the kinds whose vocabularies are their own files."""
    from tiny_model import CAPTIONS

    from imgtxt.model.fne import FeatureStats
    from imgtxt.model.modelfile import save_model
    from imgtxt.model.text_encoders import prepare

    setup = prepare(kind, CAPTIONS, {"word_dim": 6, "kernels": 8, "window": 3, "top": False, "hidden": 0})
    rng, raw, rows = np.random.default_rng(0), facts["raw_dim"], setup.config.get("vocab_size")
    if kind == "sse":
        weights = {"sse.word_embedding": rng.normal(size=(rows, 6)), "sse.conv.weight": rng.normal(size=(8, 6, 3)),
                   "sse.conv.bias": np.zeros(8)}
    else:
        idf = setup.init_tensors["bow.idf"]
        weights = {"bow.idf": idf, "bow.in.weight": rng.normal(size=(len(idf), 8)), "bow.in.bias": np.zeros(8)}
    weights["image_projection"] = rng.normal(size=(8, raw))
    config = {"name": kind, "text": setup.config,
              "joint": {"image_dim": raw, "embed_dim": 8, "similarity": "cosine", "use_abs": False, "image_dropout": 0},
              "features": json.loads((folder.parent / "model.json").read_text())["features"]}
    stats = FeatureStats(np.zeros(raw, np.float32), np.ones(raw, np.float32))
    save_model(folder, weights, None, config, stats, CAPTIONS, files=setup.files)
    return folder


VOCABULARY_FILES = {"gru": "vocab.json", "sse": "sse_vocab.json", "bow": "bow_terms.json"}
MANY = [f"w{i}" for i in range(5000)]   # more words than any of the tables holds
TOO_MANY = {"gru": {"words": ["<pad>", "<unk>", *MANY]}, "sse": MANY, "bow": {"kind": "uni", "weighting": "binary",
                                                                             "terms": MANY}}


HOSTILE_VOCABULARIES = {
    "number": b'{"words": 5}',
    "list-of-numbers": b"[1, 2]",
    "object-in-list": b'["<pad>", "<unk>", {}]',
    "object-word": b'{"words": ["<pad>", "<unk>", {}], "terms": ["x", {}], "kind": "uni", "weighting": "binary"}',
    "deep": b'{"words": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "latin-1": '["caf\xe9"]'.encode("latin-1"),
    "huge": None, "fifo": None, "too-many": None,
}


@pytest.mark.parametrize("kind", ["gru", "sse", "bow"])
@pytest.mark.parametrize("name", HOSTILE_VOCABULARIES)
def test_a_hostile_vocabulary_is_one_line(tiny_model_dir, facts, tmp_path, kind, name):
    """vocab.json (GRU, RCN), sse_vocab.json and bow_terms.json: wrong types, nesting, size, a FIFO, more words
    than the embedding table: one ModelError line when the model loads, never a TypeError or a hang."""
    if kind == "gru":
        folder = model_copy(tiny_model_dir, tmp_path / "m")
    else:
        shutil.copy2(tiny_model_dir / "model.json", tmp_path / "model.json")   # the real feature settings
        folder = thesis_model(tmp_path / "m", kind, facts)
    path = folder / VOCABULARY_FILES[kind]
    path.unlink()
    if name == "huge":
        with open(path, "wb") as f:
            f.truncate(65 << 20)                       # sparse: no disk used
    elif name == "fifo":
        os.mkfifo(path)
    elif name == "too-many":
        path.write_text(json.dumps(TOO_MANY[kind]))
    else:
        path.write_bytes(HOSTILE_VOCABULARIES[name])
    message = refused(folder, VOCABULARY_FILES[kind].replace(".", "[.]"))
    assert {"huge": "over 64 MB", "fifo": "not a regular file", "deep": "nested too deeply",
            "latin-1": "not UTF-8"}.get(name, "") in message
