"""Fitting a model's caption hubness (imgtxt.model.caption_offsets) on Flickr8k: `imgtxt tune-captions`.

- reference photos: every REFERENCE_STRIDE-th photo of the train split, through the model's own CNN runtime as
  an index makes them (never the split the settings are chosen on);
- each (top_k, weight) of a small grid is scored by the split's photo -> text recall (text -> photo does not
  move: the penalty is the same for every photo of a caption); `center` is the median offset of the split's
  captions; the best R@1+5+10 wins, the smaller weight on a tie;
- the offsets of every caption-bank line are stored; the class-name lines that add-concepts appended carry the
  centre (no penalty: the reference photos do not show most of those kinds);
- concept scale (models with a ConSE bridge): the factor on the photos' ConSE part for captions; the largest of
  CONCEPT_SCALES whose photo -> text R@1+5+10 stays within GATE_TOLERANCE of the scale 1 (search's query-gate
  rule): val's candidates are sentences, so val can veto a larger share for the class-name captions but never
  ask for one;
- photo gate (models with a ConSE bridge), on the scaled photos: `start` is the 90th percentile of the split's photos' m (their ConSE
  part's best cosine to the class names), `span` reaches m = 1; the gain of GATE_GAINS with the best photo ->
  text R@1+5+10 wins, the smaller gain on a tie. Val's captions speak of Flickr8k's world, so val mostly vetoes
  (the class-name captions it would favour are not in val's candidates).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from imgtxt.model.caption_offsets import penalty, photo_gate_scale, unit_parts
from imgtxt.model.search_tuning import photo_offsets

from .datasets import CAPTIONS_PER_IMAGE, load_split
from .metrics import evaluate_scores
from .search_fit import GATE_TOLERANCE, best_recall_smallest_weight

REFERENCE_STRIDE = 2          # 3,000 of Flickr8k's 6,000 train photos: 4.2 MB stored as int8 rows
TOP_KS = (5, 10, 20, 40)
WEIGHTS = (0.0, 0.5, 0.75, 1.0, 1.5)
GATE_PERCENTILE = 90
GATE_GAINS = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0)
CONCEPT_SCALES = (1.0, 1.2, 1.4, 1.6, 2.0)


def fit_caption_hubness(photos: np.ndarray, captions: np.ndarray, reference: np.ndarray) -> tuple[dict, list[dict]]:
    """photos (N, D), captions (5N, D) of the split, reference (R, D), at the model's content width.
    -> (chosen {"top_k", "weight", "center"}, the table)."""
    base = photos @ captions.T
    rows, centers = [], {}
    for k in TOP_KS:
        offsets = photo_offsets(captions, reference, k)
        centers[k] = float(np.median(offsets))
        for w in WEIGHTS:
            if w == 0 and rows:
                continue
            section = {"top_k": k, "weight": w, "center": centers[k]}
            i2t = evaluate_scores(base - penalty(offsets, section)[None, :], CAPTIONS_PER_IMAGE)["i2t"]
            recalls = [round(float(i2t[x]), 1) for x in ("r1", "r5", "r10")]
            rows.append({"top_k": k, "weight": w, "i2t": recalls, "i2t_sum": round(float(sum(recalls)), 2)})
    best = best_recall_smallest_weight(rows, "i2t_sum")
    return {"top_k": best["top_k"], "weight": best["weight"], "center": round(centers[best["top_k"]], 4)}, rows


def with_concept_scale(photos: np.ndarray, conse: slice, scale: float) -> np.ndarray:
    """A copy of photos with their ConSE part times scale (what CaptionHubness.gate_photos applies)."""
    scaled = photos.copy()
    scaled[:, conse] *= scale
    return scaled


def fit_concept_scale(photos: np.ndarray, captions: np.ndarray, penalties: np.ndarray,
                      conse: slice) -> tuple[float, list[dict]]:
    """photos (N, D), captions (5N, D) at content width, penalties (5N,) the chosen hubness's.
    -> (the largest scale whose R@1+5+10 is at least scale 1's minus GATE_TOLERANCE, the table)."""
    rows = []
    for scale in CONCEPT_SCALES:
        i2t = evaluate_scores(with_concept_scale(photos, conse, scale) @ captions.T - penalties[None, :], CAPTIONS_PER_IMAGE)["i2t"]
        recalls = [round(float(i2t[x]), 1) for x in ("r1", "r5", "r10")]
        rows.append({"scale": scale, "i2t": recalls, "i2t_sum": round(float(sum(recalls)), 2)})
    floor = rows[0]["i2t_sum"] - GATE_TOLERANCE
    return max(r["scale"] for r in rows if r["i2t_sum"] >= floor), rows


def fit_photo_gate(photos: np.ndarray, captions: np.ndarray, penalties: np.ndarray, conse: slice,
                   class_vectors: np.ndarray) -> tuple[dict, list[dict]]:
    """photos (N, D), captions (5N, D) at content width, penalties (5N,) the chosen hubness's.
    -> (chosen {"start", "span", "gain"}, the table)."""
    parts = photos[:, conse]
    m = (unit_parts(parts) @ class_vectors.T).max(axis=1)
    start = round(float(np.percentile(m, GATE_PERCENTILE)), 4)
    span = round(max(1.0 - start, 1e-3), 4)
    rows = []
    for gain in GATE_GAINS:
        gate = {"start": start, "span": span, "gain": gain}
        gated = photos.copy()
        gated[:, conse] *= photo_gate_scale(parts, class_vectors, gate)[:, None]
        i2t = evaluate_scores(gated @ captions.T - penalties[None, :], CAPTIONS_PER_IMAGE)["i2t"]
        recalls = [round(float(i2t[x]), 1) for x in ("r1", "r5", "r10")]
        rows.append({"gain": gain, "i2t": recalls, "i2t_sum": round(float(sum(recalls)), 2)})
    best = max(rows, key=lambda r: (r["i2t_sum"], -r["gain"]))
    return {"start": start, "span": span, "gain": best["gain"]}, rows


def class_name_rows(model, bank: list[str]) -> np.ndarray:
    """Indices of the bank lines add-concepts wrote for the classifier's classes (none without a ConSE bridge)."""
    if model.concepts is None:
        return np.zeros(0, np.int64)
    from .concepts_fit import model_class_captions

    names = set(model_class_captions(model))
    return np.array([i for i, line in enumerate(bank) if line in names], np.int64)


def reference_photos(model, dataset: str, data_dir: Path | str, quiet: bool = False) -> np.ndarray:
    """Every REFERENCE_STRIDE-th train photo's vector at content width (cached per model and photo list)."""
    from .reference_photos import embedded

    paths = load_split(dataset, data_dir, "train").image_paths[::REFERENCE_STRIDE]
    vectors = embedded(model, paths, f"{dataset}-reference", f"{dataset} reference photos", quiet)
    return np.ascontiguousarray(vectors[:, :model.content_dim], np.float32)


def tune_captions(model, dataset: str, data_dir: Path | str, split: str = "val", quiet: bool = False):
    """-> (section for caption_offsets.write, reference (R, D), bank offsets (B,), the table)."""
    from imgtxt.errors import ModelError

    from .calibrate import split_vectors

    if model.similarity_kind != "cosine":
        raise ModelError(f"{model.folder}: caption hubness is for cosine joint spaces, not order embeddings")
    bank = model.caption_bank()
    if not bank:
        raise ModelError(f"{model.folder}: no caption bank (captions.txt) to correct")
    d = model.content_dim
    images, _ = split_vectors(model, dataset, data_dir, split, quiet=quiet)
    photos = np.ascontiguousarray(images[:, :d], np.float32)
    captions = model.encode_text(load_split(dataset, data_dir, split, check_images=False).captions)[:, :d]
    reference = reference_photos(model, dataset, data_dir, quiet)
    captions = np.ascontiguousarray(captions, np.float32)
    chosen, table = fit_caption_hubness(photos, captions, reference)
    fitted_on = {"dataset": dataset, "split": split, "reference": f"train photos, one in {REFERENCE_STRIDE}"}
    if model.concepts is not None:
        penalties = penalty(photo_offsets(captions, reference, chosen["top_k"]), chosen)
        conse = slice(model.config["joint"]["embed_dim"], d)
        scale, scale_rows = fit_concept_scale(photos, captions, penalties, conse)
        gate, gate_rows = fit_photo_gate(with_concept_scale(photos, conse, scale), captions, penalties, conse, model.concepts.class_vectors)
        if scale != 1.0:
            chosen["concept_scale"] = scale
        if gate["gain"] > 0:
            chosen["photo_gate"] = gate
        fitted_on["scale_table"] = scale_rows
        fitted_on["gate_table"] = gate_rows
    offsets = photo_offsets(model.caption_bank_vectors(), reference, chosen["top_k"])
    offsets[class_name_rows(model, bank)] = chosen["center"]
    section = {**chosen, "reference_stride": REFERENCE_STRIDE, "fitted_on": fitted_on}
    return section, reference, offsets, table
