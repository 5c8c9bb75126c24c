"""Caption tokenization and the word vocabulary (no torch; used at training and query time alike).

Tokens come from NLTK's Treebank-style `NLTKWordTokenizer` on the lower-cased caption; it needs
no data download. Punctuation is kept, as in the FNE paper (section 4.3.2).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Iterable

PAD, UNK = "<pad>", "<unk>"
MAX_VOCAB_BYTES = 64 << 20   # a vocabulary of a million words is about 15 MB


@lru_cache(maxsize=1)
def _tokenizer():
    """NLTK's word tokenizer without running `nltk/__init__.py`.

    `import nltk` takes ~1.5 s here (it imports scipy when present), which would dominate a search.
    The tokenizer module needs only a few plain nltk submodules, so we let Python import them under
    temporary empty parent packages, then drop the placeholders: a later `import nltk` runs
    normally and finds the very same NLTKWordTokenizer class (tests/test_vocab.py checks this).
    """
    if "nltk" not in sys.modules:
        spec = importlib.util.find_spec("nltk")
        if spec is not None and spec.submodule_search_locations:
            roots = list(spec.submodule_search_locations)
            placeholders = {"nltk": roots, "nltk.tokenize": [os.path.join(r, "tokenize") for r in roots]}
            for name, path in placeholders.items():
                module = types.ModuleType(name)
                module.__path__ = path
                sys.modules[name] = module
            try:
                from nltk.tokenize.destructive import NLTKWordTokenizer
            finally:
                for name in placeholders:
                    sys.modules.pop(name, None)
            return NLTKWordTokenizer()
    from nltk.tokenize.destructive import NLTKWordTokenizer

    return NLTKWordTokenizer()


def tokenize(text: str) -> list[str]:
    return _tokenizer().tokenize(text.lower().strip())


class Vocabulary:
    """Word <-> id. Id 0 is padding, id 1 is the unknown word."""

    def __init__(self, words: Iterable[str]):
        self.words: list[str] = [PAD, UNK] + [w for w in words if w not in (PAD, UNK)]
        self.index = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def build(cls, captions: Iterable[str], min_count: int = 2, max_words: int | None = None) -> "Vocabulary":
        """Words seen at least `min_count` times, the `max_words` most frequent of them when given (the
        RCN paper keeps 5,000). Rarer words become <unk> during training, so the <unk> embedding is
        trained on real rare words and means something at query time."""
        counts = Counter(t for c in captions for t in tokenize(c))
        kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        return cls(kept[:max_words] if max_words else kept)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        unk = self.index[UNK]
        return [self.index.get(t, unk) for t in tokenize(text)]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.words[i] for i in ids]

    def known_fraction(self, text: str) -> float:
        tokens = tokenize(text)
        return sum(t in self.index for t in tokens) / len(tokens) if tokens else 0.0

    def save(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps({"words": self.words}, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: Path | str) -> "Vocabulary":
        """vocab.json read with a bound (a ModelError line), then checked: {"words": [str, ...]} starting with
        <pad>, <unk> (a ValueError line otherwise)."""
        from .json_file import read_json

        doc = read_json(Path(path), MAX_VOCAB_BYTES, "a vocabulary")
        words = doc.get("words") if isinstance(doc, dict) else None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"{path}: not an imgtxt vocabulary (must be {{\"words\": [strings]}})")
        if words[:2] != [PAD, UNK]:
            raise ValueError(f"{path}: not an imgtxt vocabulary (must start with {PAD}, {UNK})")
        return cls(words[2:])
