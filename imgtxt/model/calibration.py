"""A model's score calibration: the score the model gives a (sentence, photo) pair -> a confidence and a level.

model.json may carry a "calibration" section, written by `imgtxt calibrate` (imgtxt/research/calibrate.py):

  "calibration": {"method": "logistic", "slope": a, "intercept": b,
                  "levels": {"strong": c_strong, "possible": c_possible}, "fitted_on": {...}, "val": {...}}

confidence = 1 / (1 + exp(-(a * score + b))), the fitted chance that a result at this score is the photo the
sentence describes; a result is `strong` from c_strong up, `possible` from c_possible up, else `weak`. The
confidence grows with the score (a > 0), so a level is also a score threshold, the same for every query.
A model without the section still works: its results carry no confidence and no level.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from imgtxt.errors import ModelError

LEVELS = ("strong", "possible", "weak")   # best first


@dataclass(frozen=True)
class Calibration:
    slope: float
    intercept: float
    strong: float      # the lowest confidence called strong
    possible: float    # the lowest confidence called possible (below: weak)

    def confidence(self, score: float) -> float:
        z = self.slope * float(score) + self.intercept
        if z >= 0:   # the two halves keep exp() from overflowing at either end
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    def level(self, confidence: float) -> str:
        if confidence >= self.strong:
            return "strong"
        return "possible" if confidence >= self.possible else "weak"

    def threshold(self, level: str) -> float:
        """The lowest confidence of a level (weak: 0, every result)."""
        return {"strong": self.strong, "possible": self.possible, "weak": 0.0}[level]

    def score_at(self, confidence: float) -> float:
        """The score whose confidence this is (-inf for 0): a level as a score threshold."""
        if confidence <= 0.0:
            return -math.inf
        return (math.log(confidence / (1.0 - confidence)) - self.intercept) / self.slope

    @classmethod
    def from_config(cls, section, where) -> "Calibration | None":
        """model.json's "calibration" section (None when absent); a malformed one is a one-line ModelError."""
        if section is None:
            return None
        try:
            if section.get("method") != "logistic":
                raise ValueError(f"method must be 'logistic', not {section.get('method')!r}")
            values = [section["slope"], section["intercept"], section["levels"]["strong"],
                      section["levels"]["possible"]]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                       for v in values):
                raise ValueError("slope, intercept and levels must be finite numbers")
            calibration = cls(*(float(v) for v in values))
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ModelError(f"{where}: model.json has an unusable calibration section ({e})") from None
        if calibration.slope <= 0:
            raise ModelError(f"{where}: model.json calibration.slope must be above 0 (a higher score is a better "
                             f"match)")
        if not 0.0 < calibration.possible <= calibration.strong < 1.0:
            raise ModelError(f"{where}: model.json calibration levels must satisfy 0 < possible <= strong < 1")
        return calibration

    def as_config(self) -> dict:
        return {"method": "logistic", "slope": self.slope, "intercept": self.intercept,
                "levels": {"strong": self.strong, "possible": self.possible}}
