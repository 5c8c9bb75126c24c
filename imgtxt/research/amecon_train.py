"""Training and evaluating AMECON (imgtxt/amecon.py; Chami, Tamaazousti and Le Borgne 2017) on a dataset.

Regions (eq. 7, the paper's V_loc): by default each image's features are the max over 5 regions, the full image
and its 4 corners at 2/3 of each side, each region resized to the CNN's input; computed once per split and cached
beside the full-image features (a cache key of their own). regions=1 is the paper's V_glob ablation (full image).

Resumable: the output folder keeps the MLP's training state (STATE_FILE); the same command continues a stopped
run, and with a larger --epochs trains on from the last epoch.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import amecon
from .datasets import CAPTIONS_PER_IMAGE, load_split
from .feature_cache import FeatureSpec, cached_features, compute_features
from .metrics import evaluate_scores

REGIONS = 5
STATE_FILE = "amecon_state.pt"   # the MLP's training state, beside the model it continues (train_image_mlp)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class RegionExtractor:
    """A raw-feature extractor whose features are the max over amecon.region_crops of each image (eq. 7)."""

    def __init__(self, extractor, regions: int = REGIONS):
        self.inner, self.regions = extractor, regions
        for name in ("dim", "resize_size", "layer_names", "layer_dims", "baseline_slice", "backbone"):
            setattr(self, name, getattr(extractor, name))

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """(B, R, R, 3) uint8 -> (B, dim): the regions of every image, each resized to R x R, max-pooled."""
        from PIL import Image

        size = images.shape[1:3][::-1]
        crops = [np.asarray(Image.fromarray(c).resize(size, Image.BILINEAR)) if c.shape[:2] != images.shape[1:3]
                 else c for image in images for c in amecon.region_crops(image)[:self.regions]]
        return amecon.pool_regions(self.inner(np.stack(crops)), self.regions)


@dataclass(frozen=True)
class RegionSpec(FeatureSpec):
    regions: int = REGIONS

    @property
    def key(self) -> str:
        return f"{super().key}-amecon{self.regions}regions"


def region_features(split, settings, extractor=None, quiet: bool = True):
    """(raw 5-region max-pooled features (N, D), extractor) of a split, from their cache when complete."""
    from .pipeline import open_extractor

    extractor = extractor or open_extractor(settings)
    spec = RegionSpec(extractor.backbone.id, settings.layer_set, settings.crops, settings.precision, settings.runtime)
    raw = cached_features(split.dataset, split, spec)
    if raw is None:
        raw = compute_features(split.dataset, split, RegionExtractor(extractor), spec, quiet=quiet, batch_size=8)
    return raw, extractor


def _features(split, settings, kind: str, stats=None, regions: int = 1):
    from imgtxt.model.fne import FeatureStats

    from .pipeline import feature_config, model_inputs, raw_split_features

    if regions == REGIONS:
        raw, extractor = region_features(split, settings)
    elif regions == 1:
        raw, extractor = raw_split_features(split, settings, quiet=True)
    else:
        raise ValueError(f"AMECON regions must be {REGIONS} (full image + 4 corners) or 1 (full image), not {regions}")
    if kind == "fne" and stats is None:
        stats = FeatureStats.fit(raw)
    return (model_inputs(kind, raw, stats, extractor.baseline_slice), stats,
            feature_config(kind, settings, extractor))


def train_amecon(dataset: str, data_dir, settings, feature_kind: str, folder: Path, word_vectors: str = "ppmi",
                 concepts: int = 1000, neighbours: int = 3, hidden=(4096, 4096), epochs: int = 5,
                 lr: float | None = None, seed: int = 0, regions: int = REGIONS, optimizer: str = "sgd") -> dict:
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
    train_x, stats, fconfig = _features(train, settings, feature_kind, regions=regions)
    t_mlp = time.time()
    Path(folder).mkdir(parents=True, exist_ok=True)
    run: dict = {}
    weights = amecon.train_image_mlp(train_x, labels, np.arange(len(labels)) // CAPTIONS_PER_IMAGE, hidden,
                                     epochs=epochs, lr=lr, seed=seed, log=_log, optimizer=optimizer,
                                     state_path=Path(folder) / STATE_FILE, stats=run)
    seconds_per_epoch = (time.time() - t_mlp) / max(run["epochs_run"], 1)
    tensors = {**weights, "codes": codes.astype(np.int32), "centres": centres}
    if stats is not None:
        tensors.update({"fne.mean": stats.mean.astype(np.float32), "fne.std": stats.std.astype(np.float32)})
    config = {"concepts": concepts, "neighbours": neighbours, "word_vectors": word_vectors,
              "hidden": list(hidden), "features": fconfig, "regions": regions,
              "training": {"dataset": dataset, "epochs": epochs, "optimizer": optimizer,
                           "lr": lr if lr is not None else amecon.OPTIMIZERS[optimizer]["lr"], "seed": seed,
                           "mlp_seconds_per_epoch": round(seconds_per_epoch, 1),
                           "total_seconds": round(time.time() - t0, 1)}}
    amecon.save(Path(folder), tensors, words, config)
    model = amecon.AmeconModel(Path(folder))
    val_x, _, _ = _features(val, settings, feature_kind, stats, regions)
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
    # Models from before regions were used record "full"; they were trained on the full image.
    regions = model.config.get("regions")
    x, _, _ = _features(data, settings, f["kind"], stats, REGIONS if regions == REGIONS else 1)
    scores = amecon.t2i_scores(model.encode_images(x), model.encode_text(data.captions))
    return evaluate_scores(scores, CAPTIONS_PER_IMAGE, ties), scores
