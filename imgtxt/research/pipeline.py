"""Glue from a dataset folder to model inputs: raw CNN features (cached), FNE or baseline features,
token ids. Used by `imgtxt features`, `train` and `eval`; the modules it calls know nothing of each other.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from imgtxt.model.cnn_torch import FeatureSettings, torch_extractor
from imgtxt.model.fne import (
    HIGH_CUT,
    LOW_CUT,
    FeatureStats,
    full_network_embedding,
    l2_normalize,
)
from imgtxt.model.vocab import Vocabulary

from .datasets import Split, load_split

FEATURE_RUNTIMES = ("torch", "openvino")


def open_extractor(settings: FeatureSettings, device: str | None = None):
    """Raw features for dataset splits: the torch extractor, or the exported graph on OpenVINO."""
    if settings.runtime not in FEATURE_RUNTIMES:
        raise ValueError(f"feature runtime must be one of {', '.join(FEATURE_RUNTIMES)}, not {settings.runtime!r}")
    if settings.runtime != "torch" and settings.precision != "fp32":
        raise ValueError(f"--runtime {settings.runtime} computes fp32 features only; pass --precision fp32")
    extractor = torch_extractor(settings, device)
    if settings.runtime == "torch":
        return extractor
    from .graph_features import GraphFeatureExtractor

    return GraphFeatureExtractor.from_torch(extractor, settings.runtime)


def raw_split_features(split: Split, settings: FeatureSettings, extractor=None, quiet: bool = False,
                       view: str = ""):
    """(raw features (N, D) float32, extractor) of a split, from the cache when it is complete; `view`: the
    photos as a training view shows them (views.py)."""
    from .feature_cache import FeatureSpec, cached_features, compute_features
    from .views import ViewExtractor

    extractor = extractor or open_extractor(settings)
    spec = FeatureSpec(extractor.backbone.id, settings.layer_set, settings.crops, settings.precision, settings.runtime,
                       view)
    raw = cached_features(split.dataset, split, spec)
    if raw is None:
        raw = compute_features(split.dataset, split, ViewExtractor(extractor, view) if view else extractor, spec,
                               quiet=quiet, batch_size=32 if settings.crops == 1 else 8)
    return raw, extractor


def feature_config(kind: str, settings: FeatureSettings, extractor) -> dict:
    """The "features" section of model.json: everything needed to recompute a model's inputs."""
    return {
        "kind": kind, "backbone": settings.backbone, "backbone_id": extractor.backbone.id,
        "layer_set": settings.layer_set, "crops": settings.crops, "precision": settings.precision,
        "raw_dim": extractor.dim, "baseline_slice": list(extractor.baseline_slice),
        "low_cut": LOW_CUT, "high_cut": HIGH_CUT,
        **({"feature_runtime": settings.runtime} if settings.runtime != "torch" else {}),
    }


def model_inputs(kind: str, raw: np.ndarray, stats: FeatureStats | None, baseline_slice) -> np.ndarray:
    if kind == "fne":
        return full_network_embedding(raw, stats)
    if kind == "baseline":
        return l2_normalize(np.asarray(raw)[:, baseline_slice[0]:baseline_slice[1]])
    raise ValueError(f"feature kind must be 'fne' or 'baseline', not {kind!r}")


def without_restval(split: Split, raw: np.ndarray, data_dir: Path | str) -> tuple[Split, np.ndarray]:
    """COCO train as the 2019 paper used it (no restval): rows picked from the cached train+restval
    features, so the cache is neither recomputed nor overwritten."""
    from .datasets import CAPTIONS_PER_IMAGE, restval_mask

    keep = np.flatnonzero(~np.array(restval_mask(split.dataset, data_dir), dtype=bool))
    captions = [split.captions[CAPTIONS_PER_IMAGE * i + j] for i in keep for j in range(CAPTIONS_PER_IMAGE)]
    groups = None if split.groups is None else [split.groups[i] for i in keep]
    return (Split(split.dataset, split.name, [split.image_paths[i] for i in keep], captions, groups),
            np.asarray(raw)[keep])


def group_ids(groups: list[str] | None) -> np.ndarray | None:
    """Per image, an id shared by the images of one named group; an image without a group gets its own."""
    if groups is None:
        return None
    keys = [g if g else f"\0{i}" for i, g in enumerate(groups)]
    return np.unique(np.array(keys, dtype=object), return_inverse=True)[1].astype(np.int64)


def build_training_data(dataset: str, data_dir: Path | str, kind: str, settings: FeatureSettings,
                        min_count: int = 2, quiet: bool = False, max_words: int | None = None,
                        vocab_from: str = "train", coco_train: str = "restval", text_kind: str = "gru",
                        text_options: dict | None = None, train_views: tuple[str, ...] = ()):
    """vocab_from: "train" or "train+val" captions; coco_train: "restval" (VSE++) or "paper" (train only).
    text_kind "gru" keeps the paper's word vocabulary; another kind brings its own tokenizer and weights
    (imgtxt/text_encoders); the vocabulary options reach it as options min_count / max_words. train_views: the
    training photos' extra views (views.py), featurised with the centre crop's statistics."""
    from imgtxt.model import text_encoders

    from .train import TrainData

    if vocab_from not in ("train", "train+val"):
        raise ValueError(f"vocabulary source must be 'train' or 'train+val', not {vocab_from!r}")
    if coco_train not in ("restval", "paper"):
        raise ValueError(f"COCO train must be 'restval' or 'paper', not {coco_train!r}")
    train_split = load_split(dataset, data_dir, "train")
    val_split = load_split(dataset, data_dir, "val")
    raw_train, extractor = raw_split_features(train_split, settings, quiet=quiet)
    raw_val, _ = raw_split_features(val_split, settings, extractor=extractor, quiet=quiet)
    raw_views = [raw_split_features(train_split, settings, extractor=extractor, quiet=quiet, view=v)[0]
                 for v in train_views]
    if dataset == "coco" and coco_train == "paper":
        raw_views = [without_restval(train_split, r, data_dir)[1] for r in raw_views]
        train_split, raw_train = without_restval(train_split, raw_train, data_dir)
    stats = FeatureStats.fit(raw_train) if kind == "fne" else None  # training images only
    config = feature_config(kind, settings, extractor)
    vocab_captions = train_split.captions + (val_split.captions if vocab_from == "train+val" else [])
    extra = {"dataset": dataset, "train_images": len(train_split), "val_images": len(val_split),
             **({"train_views": list(train_views)} if train_views else {}),
             "vocab_min_count": min_count, "vocab_max_words": max_words, "vocab_from": vocab_from,
             **({"coco_train": coco_train} if dataset == "coco" else {})}
    if text_kind == "gru":
        vocab, setup = Vocabulary.build(vocab_captions, min_count=min_count, max_words=max_words), None
        tokenize = vocab.encode
    else:
        options = {"min_count": min_count, "max_words": max_words, **(text_options or {})}
        vocab, setup = None, text_encoders.prepare(text_kind, vocab_captions, options)
        tokenize = setup.tokenize
    return TrainData(
        train_groups=group_ids(train_split.groups),
        train_features=model_inputs(kind, raw_train, stats, extractor.baseline_slice),
        train_views=tuple(model_inputs(kind, r, stats, extractor.baseline_slice) for r in raw_views),
        train_tokens=[tokenize(c) for c in train_split.captions],
        val_features=model_inputs(kind, raw_val, stats, extractor.baseline_slice),
        val_tokens=[tokenize(c) for c in val_split.captions],
        vocab=vocab, train_captions=train_split.captions, feature_config=config, stats=stats,
        extra=extra, text_setup=setup,
    )
