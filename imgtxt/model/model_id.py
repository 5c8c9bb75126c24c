"""The model id: what an index's vectors and the caches are keyed by, so that vectors of one model are never
searched or extended with another's.

The id is the model's name and the digest of its weights (with the hubness correction, which every photo vector
carries). model.json also holds settings that change a photo's vector without touching the weights: the CNN's
crops and precision, use_abs, the image bias, a baseline model's slice, the ConSE weights, and (with the hubness
correction, whose offsets are measured against the caption bank the text side embeds) the text encoder's settings.
`save_model` records their digest as `photo_settings_sha256`; settings that no longer match it are folded into the
id. A model saved before the record existed keeps its id while its settings are `imgtxt train`'s defaults
(PHOTO_DEFAULTS), and folds in the ones that differ; so the id of every model with its saved settings stays what
it was, and an edited copy of a model folder is another model (its indexes are re-embedded, not mixed).
"""
from __future__ import annotations

import hashlib
import json

from . import text_encoders

RECORD_KEY = "photo_settings_sha256"
# imgtxt train's defaults for the settings every model has: a model without the record whose settings are these
# keeps the id it had before settings entered it
PHOTO_DEFAULTS = {"features.crops": 1, "features.precision": "auto", "joint.use_abs": False,
                  "joint.image_bias": False}
CONCEPT_KEYS = ("top_k", "weight", "confidence_weight", "raw_slice")


def photo_settings(config: dict) -> dict:
    """Every model.json value beyond the weights that changes a photo's vector. Sizes, the backbone and its
    layer set are left out: they are checked against the weights and the CNN at load, so they cannot change
    silently."""
    features, joint = config["features"], config["joint"]
    # .get: a run folder's best model may be saved from a partial config; loading refuses one without these keys
    settings = {"features.crops": features.get("crops", 1), "features.precision": features.get("precision", "auto"),
                "joint.use_abs": joint.get("use_abs", False), "joint.image_bias": joint.get("image_bias", False)}
    if features.get("kind") == "baseline":
        settings["features.baseline_slice"] = features.get("baseline_slice")
    for key in CONCEPT_KEYS if "concepts" in config else ():
        settings[f"concepts.{key}"] = config["concepts"][key]
    if config.get("search", {}).get("hubness"):
        settings["text"] = text_encoders.text_config_of(config)
    return settings


def digest_of(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def photo_settings_record(config: dict) -> str:
    """What save_model writes as `photo_settings_sha256`."""
    return digest_of(photo_settings(config))


def model_id(config: dict, name: str, weights_digest: str) -> str:
    """`name`-12 hex digits of the weights' digest, extended by the hubness correction and by every photo
    setting that differs from the record (or, without a record, from PHOTO_DEFAULTS)."""
    digest = weights_digest
    hubness = config.get("search", {}).get("hubness")
    if hubness:  # the photo vectors carry its offset: another correction is another index
        digest = hashlib.sha256((digest + json.dumps(hubness, sort_keys=True)).encode()).hexdigest()
    settings = photo_settings(config)
    recorded = config.get(RECORD_KEY)
    if recorded is None:
        changed = {k: v for k, v in settings.items() if k not in PHOTO_DEFAULTS or PHOTO_DEFAULTS[k] != v}
    else:
        changed = {} if recorded == digest_of(settings) else settings
    if changed:
        digest = hashlib.sha256((digest + "photo settings " + digest_of(changed)).encode()).hexdigest()
    return f"{name}-{digest[:12]}"
