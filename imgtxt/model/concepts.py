"""A ConSE bridge (Norouzi et al., "Zero-Shot Learning by Convex Combination of Semantic Embeddings", ICLR
2014): the CNN's own ImageNet classifier names what a photo shows, and the sentence encoder says how close a
query is to those names. It lets the joint space, learned from a few thousand captioned photos, find the 1,000
everyday kinds of things the classifier knows.

Photo side: the classifier reads the last layer's pooled activations, which the FNE already computes (no
extra CNN work); its top-k probabilities weight the sentence vectors of those classes' names (convex
combination), scaled by `weight + confidence_weight * p(top class)`. Text side: the sentence encoder's own
vector (before the joint head). Both parts are appended to the joint vectors, so one dot product gives
joint score + scaled ConSE score: the index, exact or approximate, needs nothing else.

model.json "concepts": {"kind": "conse", "top_k", "weight", "confidence_weight", "raw_slice": [start, stop],
"classes", "text_dim", ...}; tensors concepts.classifier.weight (classes, slice width),
concepts.classifier.bias (classes,), concepts.class_vectors (classes, text_dim), L2-normalised rows.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

WEIGHT = "concepts.classifier.weight"
BIAS = "concepts.classifier.bias"
CLASS_VECTORS = "concepts.class_vectors"
TENSOR_NAMES = (WEIGHT, BIAS, CLASS_VECTORS)


def tensor_shapes(config: dict) -> dict[str, tuple]:
    start, stop = config["raw_slice"]
    classes, text_dim = config["classes"], config["text_dim"]
    return {WEIGHT: (classes, stop - start), BIAS: (classes,), CLASS_VECTORS: (classes, text_dim)}


def check_config(config) -> str | None:
    """A one-line reason when a model.json "concepts" section cannot be used, else None."""
    if not isinstance(config, dict) or config.get("kind") != "conse":
        return 'concepts must be {"kind": "conse", ...}'
    ints = ("top_k", "classes", "text_dim")
    if any(not isinstance(config.get(k), int) or isinstance(config.get(k), bool) or config[k] < 1 for k in ints):
        return f"concepts needs positive integers {', '.join(ints)}"
    floats = ("weight", "confidence_weight")
    if any(not isinstance(config.get(k), (int, float)) or isinstance(config.get(k), bool)
           or not np.isfinite(config[k]) or config[k] < 0 for k in floats):
        return f"concepts needs finite non-negative numbers {', '.join(floats)}"
    raw_slice = config.get("raw_slice")
    if (not isinstance(raw_slice, list) or len(raw_slice) != 2 or not all(isinstance(v, int) for v in raw_slice)
            or not 0 <= raw_slice[0] < raw_slice[1]):
        return "concepts.raw_slice must be [start, stop] with 0 <= start < stop"
    if config["top_k"] > config["classes"]:
        return "concepts.top_k is larger than the number of classes"
    return None


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class ConceptBridge:
    """The photo and text parts appended to a model's joint vectors."""

    def __init__(self, config: dict, tensors):
        self.config = config
        self.top_k = int(config["top_k"])
        self.weight = float(config["weight"])
        self.confidence_weight = float(config["confidence_weight"])
        self.raw_slice = tuple(config["raw_slice"])
        self.dim = int(config["text_dim"])
        self._tensors = tensors

    @cached_property
    def class_vectors(self) -> np.ndarray:
        """(classes, text_dim) the class names' sentence vectors, L2-normalised (converted once: every query's
        gate reads them)."""
        return self._array(CLASS_VECTORS)

    def _array(self, name: str) -> np.ndarray:
        return np.asarray(self._tensors[name], dtype=np.float32)

    def class_probabilities(self, raw: np.ndarray) -> np.ndarray:
        """Raw FNE features (N, D_raw) -> the classifier's probabilities (N, classes)."""
        start, stop = self.raw_slice
        x = np.asarray(raw, dtype=np.float32)[:, start:stop]
        return softmax(x @ self._array(WEIGHT).T + self._array(BIAS))

    def photo_part(self, raw: np.ndarray, weight: float | None = None,
                   confidence_weight: float | None = None) -> np.ndarray:
        """(N, text_dim): the top-k classes' name vectors weighted by their probabilities (a convex
        combination), scaled by weight + confidence_weight * p(top class). The weights can be overridden
        (choosing them on val without recomputing anything else)."""
        weight = self.weight if weight is None else weight
        confidence_weight = self.confidence_weight if confidence_weight is None else confidence_weight
        probs = self.class_probabilities(raw)
        k = min(self.top_k, probs.shape[1])
        top = np.argpartition(-probs, k - 1, axis=1)[:, :k]
        p = np.take_along_axis(probs, top, axis=1)
        combined = np.einsum("nk,nkd->nd", p / p.sum(axis=1, keepdims=True), self._array(CLASS_VECTORS)[top])
        scale = weight + confidence_weight * p.max(axis=1)
        return (combined * scale[:, None]).astype(np.float32)

    def text_part(self, sentence_vectors: np.ndarray) -> np.ndarray:
        """(N, text_dim) sentence-encoder vectors, L2-normalised (they already are; kept safe)."""
        v = np.asarray(sentence_vectors, dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
