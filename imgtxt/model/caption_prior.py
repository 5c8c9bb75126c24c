"""The classifier's say on the caption bank's class lines ("A photo of an espresso."), fitted by
`imgtxt tune-caption-prior`: ConSE on the caption side.

A model with a ConSE bridge already knows, for every photo, which ImageNet classes its classifier sees: the
photo's ConSE part is the convex combination sum_k q_k * v_k of the top-k classes' name vectors (q: their
probabilities, renormalised over the top k), times the bridge's weight. A class line's plain score hears the
classifier only through that part's cosine with the line's sentence vector, weighted 0.25 like every caption,
so a line the joint space likes ("A photo of a pillow." for a teddy bear) beats the class the classifier is sure
of. With this prior, class line j scores

    score_j + weight * q_j - bias

`bias` takes every class line down a little (on Flickr8k's scenes a class line is first for a quarter of the
photos, mostly a dog breed or a thing in the background); `weight * q_j` gives it back, and more, where the
classifier is sure of that class. Other captions are unchanged.

q is read back from the ConSE part itself (non-negative least squares against the class-name vectors, then
scaled to sum 1): indexed photos store only their joint vector, and the top-k combination is recovered exactly
(to float16 rounding) from it. Class lines with the same text (two ImageNet classes are both "crane") share the
sum of their classes' q.

model.json "caption_prior": {"weight", "bias", "first_line", "classes", "captions_sha256", "fitted_on"}: the class
lines are captions.txt's lines first_line .. first_line + classes - 1, in the classifier's class order (as
add-concepts writes them); a captions.txt changed since the fit is refused with a notice.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .caption_bank import file_sha256
from .optional_parts import refusal

RECORD_KEY = "caption_prior"


def check_config(section, classes: int) -> str | None:
    """A one-line reason when a model.json "caption_prior" section cannot be used with a bridge of `classes`
    classes, else None."""
    if not isinstance(section, dict):
        return "caption_prior must be an object"
    numbers = [section.get(k) for k in ("weight", "bias")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v)) and v >= 0
               for v in numbers):
        return "caption_prior needs finite numbers weight >= 0 and bias >= 0"
    ints = [section.get(k) for k in ("first_line", "classes")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        return "caption_prior needs integers first_line >= 0 and classes >= 0"
    if section["classes"] != classes:
        return f"caption_prior is for {section['classes']} classes, the ConSE bridge has {classes}"
    if not isinstance(section.get("captions_sha256"), str):
        return "caption_prior needs the captions_sha256 it was fitted with"
    return None


def class_weights(conse_part: np.ndarray, class_vectors: np.ndarray) -> np.ndarray:
    """(classes,) q: the non-negative weights of the class-name vectors that make up a photo's ConSE part,
    summing to 1 (all zero for a part that is zero)."""
    from scipy.optimize import nnls

    x, _ = nnls(np.asarray(class_vectors, np.float64).T, np.asarray(conse_part, np.float64))
    total = x.sum()
    return x / total if total > 0 else x


class CaptionPrior:
    def __init__(self, section: dict, class_lines: list[str], class_vectors: np.ndarray, conse: slice):
        self.weight, self.bias = float(section["weight"]), float(section["bias"])
        self.first = int(section["first_line"])
        self.class_vectors, self.conse = class_vectors, conse
        # classes whose lines read the same share one q (the caption list keeps only one of the twins)
        owner = {}
        self.line_of = np.array([owner.setdefault(line.lower(), j) for j, line in enumerate(class_lines)], np.int64)

    def line_prior(self, photo: np.ndarray) -> np.ndarray:
        """(classes,) what each class line gains for this photo vector (model width): weight * q - bias."""
        q = class_weights(np.asarray(photo, np.float32)[self.conse], self.class_vectors)
        shared = np.zeros_like(q)
        np.add.at(shared, self.line_of, q)
        return (self.weight * shared[self.line_of] - self.bias).astype(np.float32)

    def apply(self, scores: np.ndarray, photo: np.ndarray) -> np.ndarray:
        """A copy of one photo's bank scores (bank,) with the prior on the class lines."""
        out = np.array(scores, np.float32)
        out[self.first:self.first + len(self.line_of)] += self.line_prior(photo)
        return out


def load(model, bank: list[str], notices: list[str] | None = None) -> CaptionPrior | None:
    """The model's caption prior for its own caption bank, or None when it has none or it cannot be used (then a
    one-line reason goes to `notices` and class lines keep their plain scores)."""
    section = model.config.get(RECORD_KEY)
    if section is None:
        return None
    folder = Path(model.folder)

    refuse = refusal(notices, folder / "model.json", "class lines ranked without the classifier's prior")

    try:
        import scipy.optimize  # noqa: F401  (class_weights' solver)
    except ImportError:
        return refuse("caption_prior needs scipy (the caption-prior extra: pip install 'scipy>=1.10')")
    bridge = model.concepts
    if bridge is None:
        return refuse("caption_prior needs a ConSE bridge (concepts)")
    reason = check_config(section, int(bridge.config["classes"]))
    if reason:
        return refuse(reason)
    if section["first_line"] + section["classes"] > len(bank):
        return refuse(f"caption_prior names lines up to {section['first_line'] + section['classes']}, "
                      f"the caption bank has {len(bank)}")
    try:
        if file_sha256(folder / "captions.txt") != section["captions_sha256"]:
            return refuse("caption_prior is stale (captions.txt changed since it was fitted)")
    except OSError as e:
        return refuse(f"captions.txt unreadable ({e.strerror or e})")
    lines = bank[section["first_line"]:section["first_line"] + section["classes"]]
    return CaptionPrior(section, lines, bridge.class_vectors, slice(model.config["joint"]["embed_dim"],
                                                                      model.content_dim))
