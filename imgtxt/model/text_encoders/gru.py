"""The paper's text encoder (Kiros et al.): NLTK word tokens -> word embedding -> GRU -> last state -> L2 norm.

numpy runtime; the torch module is research/text_modules/gru.py. Tensor names predate text-encoder kinds and stay as they were.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import TextSetup

NAMES = ("word_embedding", "gru.weight_ih", "gru.weight_hh", "gru.bias_ih", "gru.bias_hh")


def TENSOR_NAMES(text_config: dict) -> tuple[str, ...]:  # noqa: N802 (the registry's contract name)
    return NAMES


def prepare(train_captions: list[str], options: dict) -> TextSetup:
    from imgtxt.model.vocab import Vocabulary

    vocab = Vocabulary.build(train_captions, min_count=options.get("min_count", 2))
    word_dim = options.get("word_dim", 1024)
    config = {"kind": "gru", "vocab_size": len(vocab), "word_dim": word_dim}
    files = {"vocab.json": json.dumps({"words": vocab.words}, ensure_ascii=False).encode("utf-8")}
    return TextSetup(config, vocab.encode, files, description=f"GRU, vocabulary {len(vocab)} words")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # overflow-free


def l2_normalize(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class Runtime:
    def __init__(self, text_config: dict, tensors, folder: Path):
        from imgtxt.model.vocab import Vocabulary

        self.config = text_config
        self.vocab = Vocabulary.load(folder / "vocab.json")
        w = {n: np.asarray(tensors[n], dtype=np.float32) for n in NAMES}
        if w["word_embedding"].shape[0] != len(self.vocab):
            raise ValueError(f"vocab.json has {len(self.vocab)} words, the model {w['word_embedding'].shape[0]}")
        self.embedding, self.w_ih_t, self.b_ih = w["word_embedding"], w["gru.weight_ih"].T, w["gru.bias_ih"]
        self.w_hh_t, self.b_hh = np.ascontiguousarray(w["gru.weight_hh"].T), w["gru.bias_hh"]
        self.embed_dim = w["gru.weight_hh"].shape[1]

    def tokenize(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def sort_key(self, text: str) -> int:
        from imgtxt.model.vocab import tokenize

        return len(tokenize(text))

    def check_query(self, text: str) -> str | None:
        from imgtxt.model.vocab import tokenize

        if not text.strip() or not tokenize(text):
            return "empty query: describe the photo, e.g. imgtxt search \"a dog running on a beach\""
        if self.vocab.known_fraction(text) == 0.0:
            return f"none of the words in {text!r} are known to the model; try other words"
        return None

    def encode(self, token_lists: list[list[int]]) -> np.ndarray:
        seqs = [t if t else [1] for t in token_lists]  # an empty caption is one <unk>, as in training
        lengths = np.array([len(t) for t in seqs])
        h = np.zeros((len(seqs), self.embed_dim), np.float32)
        tokens = np.zeros((len(seqs), lengths.max()), np.int64)
        for i, t in enumerate(seqs):
            tokens[i, :len(t)] = t
        # Input-side gates for every step at once, as one 2-D matmul: numpy runs a 3-D @ 2-D product without
        # BLAS (9x slower here); the reshape gives the same numbers.
        words = self.embedding[tokens].reshape(-1, self.embedding.shape[1])
        x_gates = (words @ self.w_ih_t + self.b_ih).reshape(len(seqs), tokens.shape[1], -1)  # (B, T, 3H)
        for step in range(tokens.shape[1]):
            xr, xz, xn = np.split(x_gates[:, step], 3, axis=1)
            hr, hz, hn = np.split(h @ self.w_hh_t + self.b_hh, 3, axis=1)
            r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
            n = np.tanh(xn + r * hn)
            h_new = (1.0 - z) * n + z * h
            h = np.where((step < lengths)[:, None], h_new, h)
        return l2_normalize(h)
