"""Training and evaluating AMECON (imgtxt/amecon.py) on a dataset, from the cached CNN features.

Regions: the feature cache holds full-image features only, so training and evaluation here use the full image
(the paper's V_glob ablation); `amecon.region_crops` / `pool_regions` implement the 5-region pooling for callers
that extract crop features.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from . import amecon
from .datasets import CAPTIONS_PER_IMAGE, load_split
from .metrics import evaluate_scores


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _features(split, settings, kind: str, stats=None):
    from imgtxt.model.fne import FeatureStats

    from .pipeline import feature_config, model_inputs, raw_split_features

    raw, extractor = raw_split_features(split, settings, quiet=True)
    if kind == "fne" and stats is None:
        stats = FeatureStats.fit(raw)
    return (model_inputs(kind, raw, stats, extractor.baseline_slice), stats,
            feature_config(kind, settings, extractor))


def train_amecon(dataset: str, data_dir, settings, feature_kind: str, folder: Path, word_vectors: str = "ppmi",
                 concepts: int = 1000, neighbours: int = 3, hidden=(4096, 4096), epochs: int = 5, lr: float = 1e-3,
                 seed: int = 0) -> dict:
    t0 = time.time()
    train = load_split(dataset, data_dir, "train")
    val = load_split(dataset, data_dir, "val")
    words = amecon.vocabulary(train.captions, min_count=2)   # rarer words get no reliable vector
    if word_vectors == "ppmi":
        vectors = amecon.ppmi_svd_vectors(train.captions, words)
    elif word_vectors == "minilm":
        vectors = amecon.minilm_vectors(words)
    else:
        raise ValueError(f"AMECON word vectors must be 'ppmi' or 'minilm', not {word_vectors!r}")
    if concepts > len(words):
        raise ValueError(f"{concepts} meta-concepts but only {len(words)} content words in the training captions")
    t_words = time.time()
    centres = amecon.kmeans(vectors, concepts, seed=seed)
    codes = amecon.hard_codes(vectors, centres, neighbours)
    _log(f"AMECON: {len(words)} words, {word_vectors} vectors {vectors.shape[1]}-d, k-means C={concepts} "
         f"in {time.time() - t_words:.0f}s")
    word_index = {w: i for i, w in enumerate(words)}
    labels = amecon.text_codes(train.captions, word_index, codes, concepts)
    train_x, stats, fconfig = _features(train, settings, feature_kind)
    t_mlp = time.time()
    weights = amecon.train_image_mlp(train_x, labels, np.arange(len(labels)) // CAPTIONS_PER_IMAGE, hidden,
                                     epochs=epochs, lr=lr, seed=seed, log=_log)
    seconds_per_epoch = (time.time() - t_mlp) / max(epochs, 1)
    tensors = {**weights, "codes": codes.astype(np.int32), "centres": centres}
    if stats is not None:
        tensors.update({"fne.mean": stats.mean.astype(np.float32), "fne.std": stats.std.astype(np.float32)})
    config = {"concepts": concepts, "neighbours": neighbours, "word_vectors": word_vectors,
              "hidden": list(hidden), "features": fconfig, "regions": "full",
              "training": {"dataset": dataset, "epochs": epochs, "lr": lr, "seed": seed,
                           "mlp_seconds_per_epoch": round(seconds_per_epoch, 1),
                           "total_seconds": round(time.time() - t0, 1)}}
    amecon.save(Path(folder), tensors, words, config)
    model = amecon.AmeconModel(Path(folder))
    val_x, _, _ = _features(val, settings, feature_kind, stats)
    result = evaluate_scores(amecon.t2i_scores(model.encode_images(val_x), model.encode_text(val.captions)),
                             CAPTIONS_PER_IMAGE)
    _log(f"AMECON val t2i R@1 {result['t2i']['r1']:.1f} R@5 {result['t2i']['r5']:.1f} "
         f"R@10 {result['t2i']['r10']:.1f} ({seconds_per_epoch:.0f}s per MLP epoch)")
    return result


def evaluate_amecon(folder: Path, dataset: str, data_dir, split: str = "val", ties: str = "expected",
                    backbone_weights: str | None = None) -> tuple[dict, np.ndarray]:
    """(standard metrics, scores) of an AMECON model folder on a split."""
    from imgtxt.model.cnn_torch import FeatureSettings
    from imgtxt.model.fne import FeatureStats

    model = amecon.AmeconModel(Path(folder))
    f = model.config["features"]
    settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"], backbone_weights)
    stats = FeatureStats(model.tensors["fne.mean"], model.tensors["fne.std"]) if "fne.mean" in model.tensors else None
    data = load_split(dataset, data_dir, split)
    x, _, _ = _features(data, settings, f["kind"], stats)
    scores = amecon.t2i_scores(model.encode_images(x), model.encode_text(data.captions))
    return evaluate_scores(scores, CAPTIONS_PER_IMAGE, ties), scores
