"""The SSE text model of A. I. Baqapuri's 2016 thesis (Deep Learning applied to Image and Text matching, EPFL;
Bespalov et al. 2011; thesis sections 5.2, 6.5): word lookup (M = 300) -> K = 300 kernels convolved over the word
sequence (window 5, zero padding at both ends) -> tanh -> average over the sentence's positions -> a non-linearity
(ReLU, the thesis's Table 6.1) and a linear layer into the joint space -> L2 norm. The tanh on the convolution is
imgtxt's choice: the thesis names no non-linearity between the convolution and the average.
Words as in the thesis's BoW (bow.words: lower case, alphanumeric, no a/an/the), the 5,000 most frequent; 0 pads,
1 is the unknown word. numpy runtime; torch: research/text_modules/sse.py.
Tensors: sse.word_embedding (V, M), sse.conv.weight (K, M, window), sse.conv.bias (K,), sse.top.weight (E, K),
sse.top.bias (E,). A config without "top" (models trained before the top layers) has K = the joint size and no top.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from . import TextSetup
from .bow import words

NAMES = ("sse.word_embedding", "sse.conv.weight", "sse.conv.bias")
TOP_NAMES = ("sse.top.weight", "sse.top.bias")


def TENSOR_NAMES(text_config: dict) -> tuple[str, ...]:  # noqa: N802 (the registry's contract name)
    return NAMES + (TOP_NAMES if text_config.get("top") else ())


class WordIds:
    def __init__(self, vocab: list[str]):
        self.vocab = vocab
        self.index = {w: i + 2 for i, w in enumerate(vocab)}

    def __call__(self, text: str) -> list[int]:
        return [self.index.get(w, 1) for w in words(text)] or [1]


def read_vocab(path: Path) -> list[str]:
    """sse_vocab.json read with a bound (a ModelError line), then checked: a list of words (a ValueError line)."""
    from imgtxt.model.json_file import read_json
    from imgtxt.model.vocab import MAX_VOCAB_BYTES

    vocab = read_json(path, MAX_VOCAB_BYTES, "a vocabulary")
    if not isinstance(vocab, list) or not all(isinstance(w, str) for w in vocab):
        raise ValueError(f"{path}: not an SSE vocabulary (must be a list of words)")
    return vocab


def prepare(train_captions: list[str], options: dict) -> TextSetup:
    counts = Counter(w for c in train_captions for w in words(c))
    vocab = sorted(counts, key=lambda w: (-counts[w], w))[:options.get("max_words") or 5000]
    config = {"kind": "sse", "vocab_size": len(vocab) + 2, "word_dim": options.get("word_dim") or 300,
              "window": options.get("window") or 5, "kernels": options.get("kernels") or 300,
              "top": bool(options.get("top", True))}
    files = {"sse_vocab.json": json.dumps(vocab).encode("utf-8")}
    return TextSetup(config, WordIds(vocab), files,
                     description=f"SSE, window {config['window']}, {config['kernels']} kernels"
                                 f"{', ReLU + linear top' if config['top'] else ''}, vocabulary {len(vocab)} words")


def sse_forward(tokens: np.ndarray, lengths: np.ndarray, w: dict) -> np.ndarray:
    x = w["sse.word_embedding"][tokens]                       # (B, T, M); row 0 (pad) is zero
    kernel = w["sse.conv.weight"]                             # (K, M, window)
    window = kernel.shape[2]
    half = window // 2
    padded = np.pad(x, ((0, 0), (half, window - 1 - half), (0, 0)))
    # Each output position sees `window` consecutive words: gather them and do one matmul.
    steps = np.stack([padded[:, s:s + x.shape[1]] for s in range(window)], axis=3)    # (B, T, M, window)
    conv = np.tanh(steps.reshape(*steps.shape[:2], -1) @ kernel.reshape(kernel.shape[0], -1).T + w["sse.conv.bias"])
    valid = (np.arange(x.shape[1])[None, :] < lengths[:, None])[:, :, None]
    mean = (conv * valid).sum(axis=1) / lengths[:, None]
    if "sse.top.weight" in w:
        mean = np.maximum(mean, 0) @ w["sse.top.weight"].T + w["sse.top.bias"]
    return (mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class Runtime:
    def __init__(self, text_config: dict, tensors, folder: Path):
        self.config = text_config
        self.w = {n: np.asarray(tensors[n], dtype=np.float32) for n in TENSOR_NAMES(text_config)}
        self.ids = WordIds(read_vocab(folder / "sse_vocab.json"))
        rows = self.w["sse.word_embedding"].shape[0]
        if len(self.ids.vocab) + 2 > rows:   # an id past the table: an IndexError at the first query
            raise ValueError(f"sse_vocab.json has {len(self.ids.vocab)} words, the model {rows - 2}")

    def tokenize(self, text: str) -> list[int]:
        return self.ids(text)

    def sort_key(self, text: str) -> int:
        return len(words(text))

    def check_query(self, text: str) -> str | None:
        if not words(text):
            return "empty query: describe the photo, e.g. imgtxt search \"a dog running on a beach\""
        if all(i == 1 for i in self.tokenize(text)):
            return f"none of the words in {text!r} are known to the model; try other words"
        return None

    def encode(self, token_lists: list[list[int]]) -> np.ndarray:
        seqs = [t if t else [1] for t in token_lists]
        lengths = np.array([len(t) for t in seqs])
        tokens = np.zeros((len(seqs), lengths.max()), np.int64)
        for i, t in enumerate(seqs):
            tokens[i, :len(t)] = t
        return sse_forward(tokens, lengths, self.w)
