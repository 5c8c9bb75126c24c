"""A search result's confidence measured against its own query: the same meaning for every kind of query.

Raw scores are on different scales for different queries: a thing's name ("a photo of a tabby cat") scores
0.8-0.9 against its photo, a caption-like sentence 0.3-0.5 against its own (the ConSE part and the query gate
add to the first, not to the second). One score threshold for every query therefore called almost every object
result `strong` and almost every scene result `weak`. Here a result is measured by how far it stands above
what the same query scores against typical photos: the model ships reference photos (its training photos,
one in `stride`), and a query's `baseline` is its `rank`-th best score over them, plus `concept_weight` times the
weight c of the query's ConSE part (the norm of that part of its vector, which the query gate sets: about 1 for a
sentence, up to 6 for a thing's name); its `scale` is 1 + `concept_scale` x c. The ConSE part adds score to the
right photo and to the photos the classifier confuses with it alike, and the reference photos seldom show the
thing, so the more a query leans on it the higher its bar and the wider its scores spread. The confidence is a
logistic of (score - baseline) / scale, fitted on a mixed benchmark of query kinds (`imgtxt calibrate-search`,
imgtxt/research/search_confidence_fit.py, which also chooses rank, concept_weight and concept_scale); the levels
are thresholds on it. The baseline does not depend on the library: a 6-photo folder
and a 100,000-photo one rate a result alike, and within one query a higher score never gets a lower level.

model.json "calibration": {..., "search": {"feature": "above_reference", "rank", "concept_weight", "concept_scale"
(0 when absent), "slope", "intercept", "levels": {"strong", "possible"}, "file", "sha256", "photos", "fitted_on", "figures"}}; the file
(query_reference.safetensors) holds "reference" (int8 rows of full search vectors, hubness coordinate included)
and "reference.scale". Photo -> caption confidence keeps the plain calibration (calibration.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from imgtxt.errors import ModelError

from .calibration import Calibration
from .optional_parts import refusal

FILE = "query_reference.safetensors"
FEATURE = "above_reference"


def check_config(section) -> str | None:
    """A one-line reason when a calibration.search section cannot be used, else None."""
    if not isinstance(section, dict) or section.get("feature") != FEATURE:
        return f'calibration.search must be {{"feature": "{FEATURE}", ...}}'
    rank = section.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        return "calibration.search.rank must be a positive integer"
    for key in ("concept_weight", "concept_scale"):
        value = section.get(key, 0.0)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value) or value < 0:
            return f"calibration.search.{key} must be a number of at least 0"
    if not isinstance(section.get("file"), str) or not isinstance(section.get("sha256"), str):
        return "calibration.search needs its file and sha256"
    return None


class SearchConfidence:
    """score - baseline(query) -> confidence and level."""

    def __init__(self, calibration: Calibration, reference: np.ndarray, rank: int, concept_weight: float = 0.0,
                 concepts: slice = slice(0, 0), concept_scale: float = 0.0):
        self.calibration = calibration
        self.reference = reference   # (M, vector_dim) float32
        self.rank = min(rank, len(reference))
        self.concept_weight = float(concept_weight)
        self.concept_scale = float(concept_scale)
        self.concepts = concepts     # the ConSE part of a query vector (empty without one)

    def of_query(self, query: np.ndarray) -> tuple[float, float]:
        """(baseline, scale): the query's `rank`-th best score over the reference photos plus concept_weight x c,
        and 1 + concept_scale x c, c being the weight (norm) of the query's ConSE part."""
        query = np.asarray(query, np.float32).ravel()
        scores = self.reference @ query
        ranked = float(np.partition(scores, len(scores) - self.rank)[len(scores) - self.rank])
        concepts = float(np.linalg.norm(query[self.concepts]))
        return ranked + self.concept_weight * concepts, 1.0 + self.concept_scale * concepts

    def baseline(self, query: np.ndarray) -> float:
        return self.of_query(query)[0]

    def confidence(self, score: float, baseline: float, scale: float = 1.0) -> float:
        return self.calibration.confidence((score - baseline) / scale)

    def level(self, confidence: float) -> str:
        return self.calibration.level(confidence)

    def score_at(self, level: str, baseline: float, scale: float = 1.0) -> float:
        """The lowest score of a level for a query with this baseline and scale (-inf for weak)."""
        return self.calibration.score_at(self.calibration.threshold(level)) * scale + baseline


def concept_part(model) -> slice:
    """Where a model's query vectors hold their ConSE part (empty for a model without one)."""
    return slice(model.config["joint"]["embed_dim"], model.content_dim)


def write(folder: Path | str, reference: np.ndarray, calibration: Calibration, rank: int, extra: dict,
          concept_weight: float = 0.0, concept_scale: float = 0.0) -> dict:
    """Store the reference rows, then record them and the fit in model.json's calibration section (the file
    first: a crash leaves the old record or the new one, never a record of a half-written file)."""
    import json

    from safetensors.numpy import save_file

    from imgtxt.paths import replacing, writing

    from .caption_bank import file_sha256
    from .tensor_file import quantize_rows

    folder = Path(folder)
    q, scale = quantize_rows(np.asarray(reference, np.float32))
    with replacing(folder / FILE) as tmp:
        save_file({"reference": q, "reference.scale": scale}, str(tmp))
        os.chmod(tmp, 0o644)   # safetensors writes 0600: a wheel would install it unreadable for other users
    record = {"feature": FEATURE, "rank": int(rank), "concept_weight": float(concept_weight),
              "concept_scale": float(concept_scale), **calibration.as_config(), "file": FILE,
              "sha256": file_sha256(folder / FILE), "photos": int(len(reference)), **extra}
    record.pop("method")
    path = folder / "model.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if "calibration" not in config:
        raise ValueError(f"{folder}: calibrate the model (`imgtxt calibrate`) before its search confidence")
    config["calibration"]["search"] = record
    with writing(path) as f:
        f.write((json.dumps(config, indent=2) + "\n").encode("utf-8"))
    return record


def load(model, notices: list[str] | None = None) -> SearchConfidence | None:
    """The model's per-query search confidence, or None when it has none or its file cannot be trusted (then a
    one-line reason goes to `notices` and search results are rated by the plain calibration)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    from .caption_bank import file_sha256

    section = (model.config.get("calibration") or {}).get("search")
    if section is None:
        return None
    folder = Path(model.folder)

    refuse = refusal(notices, folder / FILE, "results rated by the plain calibration")

    reason = check_config(section)
    if reason:
        return refuse(reason)
    try:
        calibration = Calibration.from_config({**section, "method": "logistic"}, folder)
        path = folder / section["file"]
        if path.name != section["file"] or path.name.startswith(".") or not path.is_file():
            return refuse("listed in model.json but missing")
        if file_sha256(path) != section["sha256"]:
            return refuse("damaged (its sha256 differs from model.json's)")
        tensors = load_file(str(path))
        reference = tensors["reference"].astype(np.float32) * tensors["reference.scale"].astype(np.float32)[:, None]
    except ModelError as e:   # a malformed slope or levels
        return refuse(str(e))
    except (KeyError, TypeError, ValueError, OSError, SafetensorError) as e:
        return refuse(f"unreadable ({type(e).__name__}: {e})")
    if reference.ndim != 2 or reference.shape[1] != model.vector_dim or len(reference) == 0:
        return refuse(f"holds {reference.shape} reference rows for a {model.vector_dim}-wide model")
    if not np.isfinite(reference).all():
        return refuse("holds values that are not finite numbers")
    return SearchConfidence(calibration, np.ascontiguousarray(reference), section["rank"],
                            section.get("concept_weight", 0.0), concept_part(model), section.get("concept_scale", 0.0))


def of_model(model, notices: list[str] | None = None) -> SearchConfidence | None:
    """load(), once per model object (a server or an open Library asks on every search)."""
    cached = getattr(model, "_search_confidence", None)
    if cached is None:
        found: list[str] = []
        cached = (load(model, found), found)
        model._search_confidence = cached
    if notices is not None:
        notices.extend(cached[1])
    return cached[0]
