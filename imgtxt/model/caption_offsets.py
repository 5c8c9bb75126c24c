"""Caption hubness: the photo -> caption mirror of search_tuning's photo offsets, fitted by `imgtxt tune-captions`.

Some captions ("A child on a swing .", "A basketball player holds the ball .") are close to a great many photos
and top the list for photos they do not describe. A caption's `offset` is the mean of its `top_k` best scores
against reference photos (every `reference_stride`-th training photo, stored with the model); `caption` and the
photo -> text recall of `imgtxt eval` rank by score - weight * max(0, offset - center), `center` being the median
offset of the val captions. Only captions above the centre lose score: a caption far from every reference photo
is not thereby a good one, and promoting such captions put rare ones first ("A photo of a junco." for a rocket).
For the same reason the bank's class-name captions ("A photo of an espresso.") carry no offset: the reference
photos show few of those 1,000 kinds, so their offsets would measure the reference, not the caption.

Text -> photo search is unaffected: the penalty is the same for every photo of one caption.

**photo_gate** (models with a ConSE bridge), the mirror of search's query gate: a photo whose ConSE part is one
class's name vector (the classifier sees one thing, "an espresso") gets more of its caption scores from the
ConSE part, which is scaled by 1 + gain * clip((m - start) / span, 0, 1), m being the part's best cosine to the
class-name vectors. `start` is the 90th percentile of m over the val photos (nine in ten photos are left as they
were), `span` reaches m = 1. Photo -> caption only: search never sees it.

**concept_scale** (optional, default 1): every photo's ConSE part is multiplied by it before the gate, in
`caption` and eval's photo -> caption recall only. The bridge's weight is chosen for search on val's sentences;
naming what a photo shows leans on the class-name captions, which val's candidates do not hold, so val may only
veto a larger share for them (imgtxt/research/caption_fit.py).

model.json "caption_hubness": {"top_k", "weight", "center", "reference_stride", "concept_scale" (optional),
"photo_gate": {"start", "span", "gain"} (optional), "file", "sha256", "captions_sha256", "fitted_on"}; the file (caption_offsets.safetensors) holds "reference" (int8 rows, with
"reference.scale") and "bank" (float32, one offset per caption of captions.txt).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .caption_bank import file_sha256, recorded_file_problem
from .optional_parts import refusal
from .search_tuning import gate_scale, photo_offsets

FILE = "caption_offsets.safetensors"
RECORD_KEY = "caption_hubness"


def check_config(section) -> str | None:
    """A one-line reason when a model.json "caption_hubness" section cannot be used, else None."""
    def number(key, minimum=None):
        v = section.get(key)
        return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v)) \
            and (minimum is None or v >= minimum)

    if not isinstance(section, dict):
        return "caption_hubness must be an object"
    ints_ok = all(isinstance(section.get(k), int) and not isinstance(section.get(k), bool) and section[k] >= 1
                  for k in ("top_k", "reference_stride"))
    if not (ints_ok and number("weight", 0) and number("center")):
        return "caption_hubness needs positive integers top_k and reference_stride, a weight >= 0, a finite center"
    if "concept_scale" in section and not (number("concept_scale") and section["concept_scale"] > 0):
        return "caption_hubness.concept_scale must be a finite number > 0"
    gate = section.get("photo_gate")
    if gate is not None and not (isinstance(gate, dict) and all(
            isinstance(gate.get(k), (int, float)) and not isinstance(gate.get(k), bool) and bool(np.isfinite(gate[k]))
            for k in ("start", "span", "gain")) and gate["span"] > 0 and gate["gain"] >= 0):
        return "caption_hubness.photo_gate needs a finite start, a positive span and a gain >= 0"
    if not all(isinstance(section.get(k), str) for k in ("file", "sha256", "captions_sha256")):
        return "caption_hubness needs its file, sha256 and captions_sha256"
    return None


def penalty(offsets: np.ndarray, section: dict) -> np.ndarray:
    """What each caption loses: weight * max(0, offset - center)."""
    return section["weight"] * np.maximum(np.asarray(offsets, np.float32) - section["center"], 0.0)


def unit_parts(conse_parts: np.ndarray) -> np.ndarray:
    """Photos' ConSE parts at unit length: m is measured on the part's direction (its length is the bridge's
    weight)."""
    parts = np.asarray(conse_parts, np.float32)
    return parts / np.maximum(np.linalg.norm(parts, axis=1, keepdims=True), 1e-12)


def photo_gate_scale(conse_parts: np.ndarray, class_vectors: np.ndarray, gate: dict) -> np.ndarray:
    """(N,) the factor for each photo's ConSE part."""
    return gate_scale(unit_parts(conse_parts), class_vectors, gate)


class CaptionHubness:
    def __init__(self, section: dict, reference: np.ndarray, bank_offsets: np.ndarray,
                 conse: slice | None = None, class_vectors: np.ndarray | None = None):
        self.section, self.reference, self.bank_offsets = section, reference, bank_offsets
        self.conse, self.class_vectors = conse, class_vectors

    def gate_photos(self, photos: np.ndarray) -> np.ndarray:
        """(N, D) photo vectors with the concept scale and the photo gate on their ConSE part (a copy; unchanged
        without them)."""
        gate = self.section.get("photo_gate")
        photos = np.array(photos, np.float32)
        if self.conse is not None:
            factor = float(self.section.get("concept_scale", 1.0))
            if gate:   # m is read on the part's direction: the scale does not move the gate
                factor = factor * photo_gate_scale(photos[:, self.conse], self.class_vectors, gate)[:, None]
            photos[:, self.conse] *= factor
        return photos

    def penalties(self, captions: np.ndarray) -> np.ndarray:
        """(M,) for caption vectors at the model's content width."""
        return penalty(photo_offsets(captions, self.reference, self.section["top_k"]), self.section)

    def bank_penalties(self) -> np.ndarray:
        return penalty(self.bank_offsets, self.section)


def write(folder: Path | str, reference: np.ndarray, bank_offsets: np.ndarray, section: dict) -> dict:
    """Store the reference photos and the bank's offsets, then record them in model.json (file first: a crash
    leaves the old record or the new one, never a record of a half-written file)."""
    from safetensors.numpy import save_file

    from imgtxt.paths import replacing, writing

    from .tensor_file import quantize_rows

    folder = Path(folder)
    q, scale = quantize_rows(np.asarray(reference, np.float32))
    tensors = {"reference": q, "reference.scale": scale, "bank": np.asarray(bank_offsets, np.float32)}
    with replacing(folder / FILE) as tmp:
        save_file(tensors, str(tmp))
        os.chmod(tmp, 0o644)   # safetensors writes 0600: a wheel would install it unreadable for other users
    record = {**section, "file": FILE, "sha256": file_sha256(folder / FILE),
              "captions_sha256": file_sha256(folder / "captions.txt")}
    path = folder / "model.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config[RECORD_KEY] = record
    with writing(path) as f:
        f.write((json.dumps(config, indent=2) + "\n").encode("utf-8"))
    return record


def load(model, bank_size: int, notices: list[str] | None = None) -> CaptionHubness | None:
    """The model's caption hubness, or None when it has none or its file cannot be trusted (then a one-line
    reason goes to `notices` and captions are ranked by their plain scores)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    section = model.config.get(RECORD_KEY)
    if section is None:
        return None
    folder = Path(model.folder)

    refuse = refusal(notices, folder / FILE, "captions ranked without the hubness correction")

    reason = check_config(section)
    if reason is None and model.concepts is None:
        if "photo_gate" in section:
            reason = "caption_hubness.photo_gate needs a ConSE bridge (concepts)"
        elif section.get("concept_scale", 1.0) != 1.0:
            reason = "caption_hubness.concept_scale needs a ConSE bridge (concepts)"
    if reason:
        return refuse(reason)
    try:
        problem = recorded_file_problem(folder, section)
        if problem:
            return refuse(problem)
        tensors = load_file(str(folder / section["file"]))
        reference = tensors["reference"].astype(np.float32) * tensors["reference.scale"].astype(np.float32)[:, None]
        bank = tensors["bank"].astype(np.float32)
        if reference.ndim != 2 or reference.shape[1] != model.content_dim or bank.shape != (bank_size,):
            return refuse(f"holds {reference.shape} reference rows and {bank.shape} offsets for a "
                          f"{model.content_dim}-wide model with {bank_size} captions")
        if not (np.isfinite(reference).all() and np.isfinite(bank).all()):
            return refuse("holds values that are not finite numbers")
    except (KeyError, TypeError, ValueError, OSError, SafetensorError) as e:
        return refuse(f"unreadable ({type(e).__name__}: {e})")
    bridge = model.concepts
    conse = slice(model.config["joint"]["embed_dim"], model.content_dim) if bridge is not None else None
    return CaptionHubness(section, np.ascontiguousarray(reference), bank, conse,
                          bridge.class_vectors if bridge is not None else None)
