"""The bag-of-n-grams text models of A. I. Baqapuri's 2016 thesis, Deep Learning applied to Image and Text matching
(EPFL; ch. 5-6), numpy runtime; torch: research/text_modules/bow.py.

Text: lower-cased, every non-alphanumeric character removed, split on spaces, the articles a/an/the dropped
(section 6.1). Features: unigrams (vocabulary 5,000), or with bigrams / trigrams / skip-grams (50,000), the most
frequent in the training captions; binary presence or tf-idf = count(w, d) / |d| * log(|D| / df(w)), |d| counting the
caption's known terms.
Model: the features -> a linear map, or a one-hidden-layer MLP (ReLU), -> joint space; L2 norm. The "shallow" model
is the bigram one without hidden layer.

A caption's "tokens" are feature ids: 0 pads, 1 stands for "no known feature", 2.. are n-grams. Binary captions
list each feature once; tf-idf ones list each occurrence, and the module weights an occurrence idf / |d|, so the
sum over a caption's ids is exactly the tf-idf vector times the first layer.
Tensors: bow.idf (F,), bow.in.weight (F, D1), bow.in.bias (D1,), and with a hidden layer bow.out.weight (E, D1),
bow.out.bias (E,).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np

from . import TextSetup

ARTICLES = frozenset({"a", "an", "the"})
NGRAMS = {"uni": 5000, "bi": 50000, "tri": 50000, "skip": 50000}   # default vocabulary sizes (thesis)
DEFAULT_HIDDEN = 300    # the thesis's BoW model: a 300-unit ReLU hidden layer (section 6.4); 0 = linear ("shallow")
_NON_ALNUM = re.compile(r"[^a-z0-9 ]+")


def words(text: str) -> list[str]:
    return [w for w in _NON_ALNUM.sub(" ", text.lower()).split() if w not in ARTICLES]


def ngrams(text: str, kind: str) -> list[str]:
    """The n-gram terms of a caption: uni = words; bi adds w1_w2; tri adds w1_w2_w3; skip adds w1__w3 too."""
    ws = words(text)
    out = list(ws)
    if kind in ("bi", "tri", "skip"):
        out += [f"{a}_{b}" for a, b in zip(ws, ws[1:])]
    if kind in ("tri", "skip"):
        out += [f"{a}_{b}_{c}" for a, b, c in zip(ws, ws[1:], ws[2:])]
    if kind == "skip":
        out += [f"{a}__{c}" for a, c in zip(ws, ws[2:])]
    return out


class Vectorizer:
    """Term -> feature id (2..), document frequencies -> idf; `ids(text)` gives the module's input ids."""

    def __init__(self, kind: str, weighting: str, terms: list[str], idf: np.ndarray):
        if kind not in NGRAMS or weighting not in ("binary", "tfidf"):
            raise ValueError(f"n-grams must be one of {list(NGRAMS)} and weighting binary or tfidf")
        self.kind, self.weighting, self.terms, self.idf = kind, weighting, terms, idf
        self.index = {t: i + 2 for i, t in enumerate(terms)}

    @classmethod
    def fit(cls, captions: list[str], kind: str, weighting: str, max_features: int | None = None) -> "Vectorizer":
        docs = [ngrams(c, kind) for c in captions]
        counts = Counter(t for d in docs for t in d)
        df = Counter(t for d in docs for t in set(d))
        terms = sorted(counts, key=lambda t: (-counts[t], t))[:max_features or NGRAMS[kind]]
        idf = np.ones(len(terms) + 2, np.float32)     # pad and "nothing known" rows: 1
        idf[2:] = [math.log(len(docs) / df[t]) for t in terms]
        return cls(kind, weighting, terms, idf)

    def ids(self, text: str) -> list[int]:
        found = [self.index[t] for t in ngrams(text, self.kind) if t in self.index]
        if self.weighting == "binary":
            found = sorted(set(found))
        return found or [1]

    def to_json(self) -> bytes:
        return json.dumps({"kind": self.kind, "weighting": self.weighting, "terms": self.terms}).encode("utf-8")

    @classmethod
    def from_doc(cls, doc, idf: np.ndarray, where: str) -> "Vectorizer":
        """A parsed bow_terms.json checked: {"kind", "weighting": str, "terms": [str, ...]}, else a ValueError."""
        terms = doc.get("terms") if isinstance(doc, dict) else None
        if not (isinstance(terms, list) and all(isinstance(t, str) for t in terms)
                and isinstance(doc.get("kind"), str) and isinstance(doc.get("weighting"), str)):
            raise ValueError(f"{where}: not a bag-of-words vocabulary (kind, weighting and a list of terms)")
        return cls(doc["kind"], doc["weighting"], terms, idf)


def token_weights(tokens: np.ndarray, lengths: np.ndarray, idf: np.ndarray, weighting: str) -> np.ndarray:
    """(B, T) ids -> per-occurrence weights: 1 (binary) or idf / |d| (tf-idf); 0 on padding."""
    valid = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    if weighting == "binary":
        w = np.ones(tokens.shape, np.float32)
    else:
        w = idf[tokens] / lengths[:, None].astype(np.float32)
    return np.where(valid, w, 0.0).astype(np.float32)


def TENSOR_NAMES(text_config: dict) -> tuple[str, ...]:  # noqa: N802 (the registry's contract name)
    base = ("bow.idf", "bow.in.weight", "bow.in.bias")
    return base + (("bow.out.weight", "bow.out.bias") if text_config.get("hidden") else ())


def prepare(train_captions: list[str], options: dict) -> TextSetup:
    kind, weighting = options.get("ngrams") or "uni", options.get("weighting") or "binary"
    vec = Vectorizer.fit(train_captions, kind, weighting, options.get("max_words"))
    config = {"kind": "bow", "ngrams": kind, "weighting": weighting, "features": len(vec.terms) + 2,
              "hidden": DEFAULT_HIDDEN if options.get("hidden") is None else int(options["hidden"])}
    return TextSetup(config, vec.ids, {"bow_terms.json": vec.to_json()}, init_tensors={"bow.idf": vec.idf},
                     description=f"bag of {kind}-grams ({weighting}, {len(vec.terms)} terms), "
                                 f"{'MLP hidden ' + str(config['hidden']) if config['hidden'] else 'linear'}")


def _pad(token_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    seqs = [t if t else [1] for t in token_lists]
    lengths = np.array([len(t) for t in seqs])
    tokens = np.zeros((len(seqs), lengths.max()), np.int64)
    for i, t in enumerate(seqs):
        tokens[i, :len(t)] = t
    return tokens, lengths


class Runtime:
    def __init__(self, text_config: dict, tensors, folder: Path):
        from imgtxt.model.json_file import read_json
        from imgtxt.model.vocab import MAX_VOCAB_BYTES

        self.config = text_config
        self.w = {n: np.asarray(tensors[n], dtype=np.float32) for n in TENSOR_NAMES(text_config)}
        path = folder / "bow_terms.json"
        doc = read_json(path, MAX_VOCAB_BYTES, "a vocabulary")
        self.vectorizer = Vectorizer.from_doc(doc, self.w["bow.idf"], str(path))
        rows = min(self.w["bow.idf"].shape[0], self.w["bow.in.weight"].shape[0])
        if len(self.vectorizer.terms) + 2 > rows:   # an id past the tables: an IndexError at the first query
            raise ValueError(f"bow_terms.json has {len(self.vectorizer.terms)} terms, the model {rows - 2}")

    def tokenize(self, text: str) -> list[int]:
        return self.vectorizer.ids(text)

    def sort_key(self, text: str) -> int:
        return 0

    def check_query(self, text: str) -> str | None:
        if not words(text):
            return "empty query: describe the photo, e.g. imgtxt search \"a dog running on a beach\""
        if self.tokenize(text) == [1]:
            return f"none of the words in {text!r} are known to the model; try other words"
        return None

    def encode(self, token_lists: list[list[int]]) -> np.ndarray:
        tokens, lengths = _pad(token_lists)
        weights = token_weights(tokens, lengths, self.w["bow.idf"], self.config["weighting"])
        h = np.einsum("bt,btd->bd", weights, self.w["bow.in.weight"][tokens]) + self.w["bow.in.bias"]
        if self.config.get("hidden"):
            h = np.maximum(h, 0) @ self.w["bow.out.weight"].T + self.w["bow.out.bias"]
        return (h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12)).astype(np.float32)
