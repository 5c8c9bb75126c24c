"""Two corrections a search applies on top of a model's scores, fitted on val after training (`imgtxt
tune-search`) and stored in model.json "search":

- **hubness** (CSLS, Conneau et al., "Word Translation Without Parallel Data", ICLR 2018; the query-bank idea
  of Bogolin et al., "Cross Modal Retrieval with Querybank Normalisation", CVPR 2022): in a joint space some
  photos are close to almost every sentence and crowd every result list. A photo's `offset` is the mean of its
  `top_k` best scores against the model's caption bank (the training captions, which a user's queries
  resemble; every `bank_stride`-th caption, to keep the cost per indexed photo small); a search ranks by score - weight * (offset - center), `center` being the mean offset of the val
  photos, so a typical photo keeps its score and scores stay on the scale a user knows (the calibration's
  levels read them). The photo vector carries -weight * (offset - center) as one more coordinate and a sentence vector carries 1 there, so one dot product gives the corrected score and the index
  (exact or Annoy) needs nothing else. Photo-to-caption ranking is unaffected: the offset is the same for
  every caption of one photo, and `caption` leaves the coordinate out.
- **query_gate** (models with a ConSE bridge): a query that reads like the name of a thing the CNN's classifier
  knows ("a cup of coffee", "a photo of a tabby cat") rather than a caption-like sentence gets more of its
  score from the classifier's side: its ConSE part is scaled by 1 + gain * clip((m - start) / span, 0, 1),
  with m its best cosine to the class-name vectors. `start` is the 90th percentile of m over the val captions,
  so nine in ten caption-like sentences are left as they were. Search only: scaling one sentence's ConSE part
  changes the ranking of photos for that sentence, but it would make some captions outrank others for every
  photo, so the caption bank is never gated.

model.json "search": {"hubness": {"top_k", "weight", "center", "bank_stride"}, "query_gate": {"start", "span", "gain"}}, either optional.
"""
from __future__ import annotations

import numpy as np


def check_config(config) -> str | None:
    """A one-line reason when a model.json "search" section cannot be used, else None."""
    if not isinstance(config, dict) or set(config) - {"hubness", "query_gate", "fitted_on"}:
        return 'search must be {"hubness": {...}, "query_gate": {...}}'

    def numbers(section, keys, positive=()):
        if not isinstance(section, dict):
            return False
        for key in keys:
            v = section.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v) or v < 0 \
                    or (key in positive and v <= 0):
                return False
        return True

    hub = config.get("hubness")
    if hub is not None and (not numbers(hub, ("top_k", "weight"), ("top_k",)) or not isinstance(hub["top_k"], int)
                            or not isinstance(hub.get("center", 0.0), (int, float)) or isinstance(hub.get("center"), bool)
                            or not np.isfinite(hub.get("center", 0.0))
                            or not isinstance(hub.get("bank_stride", 1), int) or isinstance(hub.get("bank_stride"), bool)
                            or hub.get("bank_stride", 1) < 1):
        return ("search.hubness needs a positive integer top_k, a non-negative weight, a finite center and a "
                "positive integer bank_stride")
    gate = config.get("query_gate")
    if gate is not None and (not numbers(gate, ("span", "gain"), ("span",)) or isinstance(gate.get("start"), bool)
                             or not isinstance(gate.get("start"), (int, float)) or not np.isfinite(gate["start"])):
        return "search.query_gate needs a finite start, a non-negative gain and a positive span"
    return None


def photo_offsets(vectors: np.ndarray, bank: np.ndarray, top_k: int, chunk: int = 256) -> np.ndarray:
    """(N,) mean of each photo's top_k scores against the bank's vectors (rows of the same width)."""
    vectors = np.asarray(vectors, np.float32)
    k = min(top_k, len(bank))
    out = np.empty(len(vectors), np.float32)
    for s in range(0, len(vectors), chunk):
        scores = vectors[s:s + chunk] @ bank.T
        out[s:s + chunk] = np.partition(scores, scores.shape[1] - k, axis=1)[:, -k:].mean(axis=1)
    return out


def gate_queries(model, vectors: np.ndarray) -> np.ndarray:
    """Caption vectors (the model's encode_text) -> the same texts' query vectors: the query gate on the ConSE
    part, in a copy (`vectors` itself without a gate). Evaluation gates the captions it encoded instead of
    encoding them twice."""
    gate = model.config.get("search", {}).get("query_gate")
    if not gate or model.concepts is None:
        return vectors
    out = np.array(vectors, np.float32)
    h = model.config["joint"]["embed_dim"]
    part = out[:, h:model.content_dim]
    part *= gate_scale(part, model.concepts.class_vectors, gate)[:, None]
    return out


def gate_scale(sentence_parts: np.ndarray, class_vectors: np.ndarray, gate: dict) -> np.ndarray:
    """(N,) the factor for each sentence's ConSE part: 1 + gain * clip((m - start) / span, 0, 1)."""
    m = (np.asarray(sentence_parts, np.float32) @ np.asarray(class_vectors, np.float32).T).max(axis=1)
    return 1.0 + gate["gain"] * np.clip((m - gate["start"]) / gate["span"], 0.0, 1.0)
