"""The vectors of the last few search queries, by text: a program or the web page that repeats a query (paging,
a refreshed page, a saved search) skips the text encoder, which is most of a warm query's time."""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

QUERIES_KEPT = 256   # ~1.4 MB of vectors at the shipped model's 1,411 dimensions


class QueryVectors:
    """`encode(texts)` -> (N, D) vectors, with single texts remembered (least recently used dropped first).
    Each answer is a copy: a caller may change its array without changing the next one's."""

    def __init__(self, encode, size: int = QUERIES_KEPT):
        self._encode, self._size = encode, size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()   # the web app queries from a thread pool

    def __call__(self, texts: list[str]) -> np.ndarray:
        if len(texts) != 1 or not isinstance(texts[0], str):
            return self._encode(texts)
        text = texts[0]
        with self._lock:
            vectors = self._kept.get(text)
            if vectors is not None:
                self._kept.move_to_end(text)
                return vectors.copy()
        vectors = self._encode(texts)
        with self._lock:
            self._kept[text] = vectors.copy()
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return vectors
