"""Fitting a model's search corrections (imgtxt.model.search_tuning) on a dataset split, Flickr8k val.

- hubness: each (top_k, weight) of a small grid is scored by the split's text->photo recall (photo->text recall
  does not move: the offset is the same for all captions of a photo); the best sum of R@1/5/10 wins, the smaller
  weight on a tie.
- query gate: `start` is the 90th percentile of the val captions' best cosine to the class names, `span` is
  SPAN; the gain is the largest of GAINS whose val rsum stays within GATE_TOLERANCE of no gate. Val's captions
  are sentences, not names of things: val can only veto a gain, not ask for one (the object dev set,
  bench/object_devset.py, is where the gain shows).

The photo vectors come from the model's own CNN runtime as an index makes them (research.calibrate's cached
split vectors); no torch when the model's CNN graph exists.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from imgtxt.model import search_tuning
from imgtxt.model.model_id import RECORD_KEY, photo_settings_record
from imgtxt.paths import writing

from .datasets import CAPTIONS_PER_IMAGE
from .metrics import evaluate_scores

HUBNESS_TOP_K = (3, 5, 10)
BANK_STRIDE = 4   # a quarter of the bank: 0.8 of val's t2i R@1+5+10 for a quarter of the work per indexed photo
HUBNESS_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
GATE_PERCENTILE, SPAN = 90, 0.3
GAINS = (0.0, 2.0, 3.0, 5.0, 8.0, 12.0)
GATE_TOLERANCE = 0.25


def _recall_sum(recalls: dict) -> float:
    return float(sum(recalls[k] for k in ("r1", "r5", "r10")))


def fit_hubness(photos: np.ndarray, captions: np.ndarray, bank: np.ndarray, stride: int = 1) -> tuple[dict, list[dict]]:
    """photos (N, D) and captions (5N, D) at content width; bank (B, D), already cut to every stride-th row.
    -> (chosen, table)."""
    base = photos @ captions.T
    rows = []
    for k in HUBNESS_TOP_K:
        offsets = search_tuning.photo_offsets(photos, bank, k)
        for w in HUBNESS_WEIGHTS:
            if w == 0 and rows:
                continue
            t2i = evaluate_scores(base - w * offsets[:, None], CAPTIONS_PER_IMAGE)["t2i"]
            rows.append({"top_k": k, "weight": w, "t2i": [round(float(t2i[x]), 1) for x in ("r1", "r5", "r10")],
                         "t2i_sum": round(_recall_sum(t2i), 2)})
    best = best_recall_smallest_weight(rows, "t2i_sum")
    center = float(search_tuning.photo_offsets(photos, bank, best["top_k"]).mean())
    return {"top_k": best["top_k"], "weight": best["weight"], "center": round(center, 4), "bank_stride": stride}, rows


def fit_gate(scores_i2t: np.ndarray, photos: np.ndarray, captions: np.ndarray, conse: slice,
             class_vectors: np.ndarray) -> tuple[dict, list[dict]]:
    """scores_i2t (N, 5N) as a caption ranks them (hubness included); captions (5N, D) ungated."""
    m = (captions[:, conse] @ class_vectors.T).max(axis=1)
    start = float(np.percentile(m, GATE_PERCENTILE))
    i2t = evaluate_scores(scores_i2t, CAPTIONS_PER_IMAGE)["i2t"]
    i2t_sum = _recall_sum(i2t)
    extra = scores_i2t - photos @ captions.T    # the hubness offsets (zero without them)
    rows = []
    for gain in GAINS:
        gate = {"start": round(start, 4), "span": SPAN, "gain": gain}
        gated = captions.copy()
        gated[:, conse] *= search_tuning.gate_scale(captions[:, conse], class_vectors, gate)[:, None]
        t2i = evaluate_scores(photos @ gated.T + extra, CAPTIONS_PER_IMAGE)["t2i"]
        rows.append({"gain": gain, "rsum": round(i2t_sum + _recall_sum(t2i), 2),
                     "t2i": [round(float(t2i[x]), 1) for x in ("r1", "r5", "r10")]})
    return {"start": round(start, 4), "span": SPAN, "gain": largest_safe_gain(rows)["gain"]}, rows


def best_recall_smallest_weight(rows: list[dict], key: str) -> dict:
    """The hubness rule (here and in caption_fit): the row with the best recall sum `key`; on a tie the smaller
    weight, then the first row (the smaller top_k)."""
    return max(rows, key=lambda r: (r[key], -r["weight"]))


def largest_safe_gain(rows: list[dict], tolerance: float = GATE_TOLERANCE) -> dict:
    """The gate rule: rows[0] is no gate (gain 0); the largest gain whose val rsum is at least rows[0]'s minus
    `tolerance`."""
    floor = rows[0]["rsum"] - tolerance
    return max((r for r in rows if r["rsum"] >= floor), key=lambda r: r["gain"])


def tune_search(model, dataset: str, data_dir: Path | str, split: str = "val", quiet: bool = False) -> dict:
    """The "search" section for model.json, with the val tables it was chosen from."""
    from .calibrate import split_vectors
    from .datasets import load_split

    from imgtxt.errors import ModelError

    if model.similarity_kind != "cosine":
        raise ModelError(f"{model.folder}: the search corrections are for cosine joint spaces, not order embeddings")
    d, h = model.content_dim, model.config["joint"]["embed_dim"]
    images, _ = split_vectors(model, dataset, data_dir, split, quiet=quiet)
    photos = np.ascontiguousarray(images[:, :d], dtype=np.float32)
    captions = model.encode_text(load_split(dataset, data_dir, split, check_images=False).captions)[:, :d]
    stride = BANK_STRIDE if len(model.caption_bank()) >= 4 * BANK_STRIDE * max(HUBNESS_TOP_K) else 1
    bank = model.caption_bank_vectors(stride)
    hubness, hub_rows = fit_hubness(photos, captions, bank, stride)
    section: dict = {"hubness": hubness} if hubness["weight"] > 0 else {}
    fitted_on = {"dataset": dataset, "split": split, "hubness_table": hub_rows}
    if model.concepts is not None:
        offsets = search_tuning.photo_offsets(photos, bank, hubness["top_k"])
        scores = photos @ captions.T - hubness["weight"] * (offsets[:, None] - hubness["center"])
        gate, gate_rows = fit_gate(scores, photos, captions, slice(h, d), model.concepts.class_vectors)
        if gate["gain"] > 0:
            section["query_gate"] = gate
        fitted_on["gate_table"] = gate_rows
    section["fitted_on"] = fitted_on
    return section


def write_search(folder: Path | str, section: dict) -> Path:
    """Store the section in model.json ("search"), atomically. The model id changes with the hubness settings
    (photo vectors carry the offset): indexes made before are re-embedded, and the calibration must be refit."""
    path = Path(folder) / "model.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["search"] = section
    config[RECORD_KEY] = photo_settings_record(config)   # with hubness, the text settings are photo settings too
    with writing(path) as f:
        f.write((json.dumps(config, indent=2) + "\n").encode("utf-8"))
    return path
