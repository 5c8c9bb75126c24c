"""A result's confidence and level, and `--min-score` as a score threshold: from the model's calibration, measured
against the query's own baseline for search results when the model has a per-query search confidence
(imgtxt/model/search_confidence.py)."""
from __future__ import annotations

import math

from .query import QueryError, encode_query


def min_score_of(model, min_score, text: str | None = None) -> tuple[float | None, float | None]:
    """`--min-score` as (score threshold for the search, lowest confidence kept): a number is a score; a level
    name (strong / possible / weak) is the model's calibrated threshold: measured against the query's own
    baseline when the model has a per-query search confidence and `text` is the query, else one score for every
    query."""
    from imgtxt.model.calibration import LEVELS

    if min_score is None or not isinstance(min_score, str):
        return min_score, None
    try:
        return float(min_score), None
    except ValueError:
        pass
    level = min_score.strip().lower()
    if level not in LEVELS:
        raise QueryError(f"--min-score must be a number or one of {', '.join(LEVELS)}, not {min_score!r}")
    if model.calibration is None:
        raise QueryError(f"--min-score {level}: the model in {model.folder} has no calibration (run `imgtxt "
                         f"calibrate`); give a score instead")
    per_query = search_confidence_of(model) if text is not None else None
    if per_query is not None:
        confidence = per_query.calibration.threshold(level)
        score = per_query.score_at(level, *per_query.of_query(encode_query(model, text)))
    else:
        confidence = model.calibration.threshold(level)
        score = model.calibration.score_at(confidence)
    # A hair below, so that rounding never drops a result whose confidence reaches the threshold.
    return (None if math.isinf(score) else score - 1e-9 * max(1.0, abs(score))), confidence


def search_confidence_of(model, notices: list[str] | None = None):
    """The model's per-query search confidence (imgtxt/model/search_confidence.py), or None."""
    from imgtxt.model import search_confidence

    return search_confidence.of_model(model, notices)


def rate(model, matches: list, min_confidence: float | None = None, text: str | None = None) -> list:
    """Fill each match's confidence and level from the model's calibration (left None without one): for the
    results of a search for `text`, measured against that query's baseline when the model has a per-query search
    confidence. Drop those below `min_confidence`, renumbering the ranks."""
    calibration = model.calibration
    if calibration is None:
        return matches
    per_query = search_confidence_of(model) if text is not None else None
    if per_query is not None:
        baseline, scale = per_query.of_query(encode_query(model, text))
        for m in matches:
            m.confidence = per_query.confidence(m.score, baseline, scale)
            m.level = per_query.level(m.confidence)
    else:
        for m in matches:
            m.confidence = calibration.confidence(m.score)
            m.level = calibration.level(m.confidence)
    if min_confidence is not None:
        matches = [m for m in matches if m.confidence >= min_confidence]
        for i, m in enumerate(matches):
            m.rank = i + 1
    return matches
