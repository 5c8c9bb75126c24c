"""Glue from a dataset folder to model inputs: raw CNN features (cached), FNE or baseline features,
token ids. Used by `imgtxt features`, `train` and `eval`; the modules it calls know nothing of each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .datasets import Split, load_split
from .fne import HIGH_CUT, LOW_CUT, FeatureStats, full_network_embedding, l2_normalize
from .vocab import Vocabulary


@dataclass
class FeatureSettings:
    backbone: str = "efficientnet_lite0"
    layer_set: str = "all"
    crops: int = 1
    precision: str = "auto"
    backbone_weights: str | None = None   # a file, "random", or None for the backbone's standard weights


def open_extractor(settings: FeatureSettings, device: str | None = None):
    from .backbones import load_backbone
    from .fne import RawFeatureExtractor

    backbone = load_backbone(settings.backbone, settings.backbone_weights)
    return RawFeatureExtractor(backbone, settings.layer_set, settings.crops, device=device,
                               precision=settings.precision)


def raw_split_features(split: Split, settings: FeatureSettings, extractor=None, quiet: bool = False):
    """(raw features (N, D) float32, extractor) of a split, from the cache when it is complete."""
    from .feature_cache import FeatureSpec, cached_features, compute_features

    extractor = extractor or open_extractor(settings)
    spec = FeatureSpec(extractor.backbone.id, settings.layer_set, settings.crops, settings.precision)
    raw = cached_features(split.dataset, split, spec)
    if raw is None:
        raw = compute_features(split.dataset, split, extractor, spec, quiet=quiet,
                               batch_size=32 if settings.crops == 1 else 8)
    return raw, extractor


def feature_config(kind: str, settings: FeatureSettings, extractor) -> dict:
    """The "features" section of model.json: everything needed to recompute a model's inputs."""
    return {
        "kind": kind, "backbone": settings.backbone, "backbone_id": extractor.backbone.id,
        "layer_set": settings.layer_set, "crops": settings.crops, "precision": settings.precision,
        "raw_dim": extractor.dim, "baseline_slice": list(extractor.baseline_slice),
        "low_cut": LOW_CUT, "high_cut": HIGH_CUT,
    }


def model_inputs(kind: str, raw: np.ndarray, stats: FeatureStats | None, baseline_slice) -> np.ndarray:
    if kind == "fne":
        return full_network_embedding(raw, stats)
    if kind == "baseline":
        return l2_normalize(np.asarray(raw)[:, baseline_slice[0]:baseline_slice[1]])
    raise ValueError(f"feature kind must be 'fne' or 'baseline', not {kind!r}")


def build_training_data(dataset: str, data_dir: Path | str, kind: str, settings: FeatureSettings,
                        min_count: int = 2, quiet: bool = False, text_kind: str = "gru",
                        text_options: dict | None = None):
    """text_kind "gru" keeps the paper's word vocabulary; another kind brings its own tokenizer and weights
    (imgtxt/text_encoders)."""
    from . import text_encoders
    from .train import TrainData

    train_split = load_split(dataset, data_dir, "train")
    val_split = load_split(dataset, data_dir, "val")
    raw_train, extractor = raw_split_features(train_split, settings, quiet=quiet)
    raw_val, _ = raw_split_features(val_split, settings, extractor=extractor, quiet=quiet)
    stats = FeatureStats.fit(raw_train) if kind == "fne" else None  # training images only
    config = feature_config(kind, settings, extractor)
    extra = {"dataset": dataset, "train_images": len(train_split), "val_images": len(val_split)}
    if text_kind == "gru":
        vocab, setup = Vocabulary.build(train_split.captions, min_count=min_count), None
        tokenize = vocab.encode
        extra["vocab_min_count"] = min_count
    else:
        vocab, setup = None, text_encoders.prepare(text_kind, train_split.captions, text_options or {})
        tokenize = setup.tokenize
    return TrainData(
        train_features=model_inputs(kind, raw_train, stats, extractor.baseline_slice),
        train_tokens=[tokenize(c) for c in train_split.captions],
        val_features=model_inputs(kind, raw_val, stats, extractor.baseline_slice),
        val_tokens=[tokenize(c) for c in val_split.captions],
        vocab=vocab, train_captions=train_split.captions, feature_config=config, stats=stats,
        extra=extra, text_setup=setup,
    )


class ImageEmbedder:
    """Photos -> joint-space vectors with a trained model: its CNN settings, its FNE statistics."""

    def __init__(self, model, device: str | None = None, backbone_weights: str | None = None):
        from .backbones import BackboneError
        from .modelfile import ModelError

        f = model.features
        self.model = model
        self.settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"], backbone_weights)
        try:
            self.extractor = open_extractor(self.settings, device=device)
        except (BackboneError, ValueError) as e:  # unknown backbone or layer set, missing weights: one line
            raise ModelError(f"{model.folder}: cannot build its image network ({e})") from None
        if self.extractor.backbone.id != f["backbone_id"] and f["backbone_id"].split("@")[1] != "random":
            raise ModelError(
                f"the model was trained on {f['backbone_id']} features but this backbone is "
                f"{self.extractor.backbone.id}; its vectors would be meaningless"
            )
        if self.extractor.dim != f["raw_dim"]:
            raise ModelError(f"backbone gives {self.extractor.dim} features, the model expects {f['raw_dim']}")

    @property
    def resize_size(self) -> int:
        return self.extractor.resize_size

    def embed(self, images: np.ndarray) -> np.ndarray:
        """(B, R, R, 3) uint8 squares from `images.load_square(path, self.resize_size)` -> (B, D)."""
        return self.model.encode_raw_images(self.extractor(images))
