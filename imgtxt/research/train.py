"""Training the joint space (2019 FNE paper section 4.3.1): Adam, batch 128, gradient clipping 2, every
other pair in the batch as contrastive example, the best epoch by validation rsum kept. The thesis preset trains
with plain SGD and a linear lr decay instead, the RCN preset with batch 16 and no clipping (presets.py).

Curriculum (PH, POE): phase 1 with the sum loss until validation stops improving, then phase 2
continues from phase 1's best model with the max loss, with a new optimiser (Adam's moments start at zero: the
paper does not say; phase 1's moments belong to its last epoch's weights and to the sum loss). Resumable: `state.pt` in the run folder is
rewritten atomically after every epoch; rerunning the same command continues from it.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from imgtxt.model.fne import FeatureStats
from imgtxt.model.modelfile import save_model
from imgtxt.model.text_encoders import TextSetup
from imgtxt.model.vocab import Vocabulary

from .checkpoints import (
    atomic_torch_save,
    average_is_current,
    keep_snapshot,
    load_snapshots,
    load_state,
    load_weights,
)
from .feature_cache import cache_root
from .joint_model import JointConfig, JointModel, pad_batch
from .losses import hinge_loss, same_image_mask, single_negative_loss
from .metrics import evaluate_scores
from .views import batch_rows

# The presets live in presets.py; imported here too because callers and tests know them as train.preset etc.
from .presets import (  # noqa: F401
    OTHER_PRESETS,
    PRESET_NAMES,
    Phase,
    TrainConfig,
    preset,
    with_learning_rates,
)


@dataclass
class TrainData:
    """Everything training needs, already featurised: features row i has captions 5i..5i+4."""

    train_features: np.ndarray      # (N, D) int8 FNE or float32 baseline
    train_tokens: list[list[int]]   # 5N token id lists
    val_features: np.ndarray
    val_tokens: list[list[int]]
    vocab: Vocabulary | None        # the GRU's vocabulary (None when text_setup says otherwise)
    train_captions: list[str]       # raw text, shipped as the caption bank
    feature_config: dict            # model.json "features" section
    stats: FeatureStats | None = None
    extra: dict = field(default_factory=dict)
    text_setup: TextSetup | None = None   # the text encoder's kind; None = a GRU over `vocab`
    int8: tuple[str, ...] = ()      # tensors stored int8 (per-row scales) in the saved model
    train_groups: np.ndarray | None = None  # (N,) group id per image: one group's images are never negatives
    train_views: tuple[np.ndarray, ...] = ()  # the same rows seen mirrored / zoomed (views.py); one drawn per pair

    def text_config(self, cfg: "TrainConfig") -> dict:
        if self.text_setup is not None:
            return self.text_setup.config
        return {"kind": "gru", "vocab_size": len(self.vocab), "word_dim": cfg.word_dim}


class TextInputs:
    """Caption ids -> what the text module takes. When the encoder's lower part is frozen, its output is computed
    once here (per run, in memory) and batches start from it: a fine-tuned top layer then costs an epoch only
    the trainable part. With `cache_dir`, that output is also kept on disk for the next run (text_prefix_cache)."""

    def __init__(self, model: JointModel, token_lists: list[list[int]], device, batch: int = 256,
                 cache_dir: Path | None = None):
        from .text_prefix_cache import load_prefix, prefix_key, save_prefix

        self.model, self.tokens, self.device = model, token_lists, device
        self.prefix: list[torch.Tensor] | torch.Tensor | None = None
        self.from_cache = False
        if not model.text.has_frozen_prefix:
            return
        path = cache_dir / f"{prefix_key(model.text, token_lists)}.pt" if cache_dir is not None else None
        if path is not None:
            self.prefix = load_prefix(path, len(token_lists))
            self.from_cache = self.prefix is not None
            if self.from_cache:
                return
        order = np.argsort([len(t) for t in token_lists], kind="stable")
        parts: list = [None] * len(token_lists)
        with torch.no_grad():
            for s in range(0, len(order), batch):
                rows = order[s:s + batch]
                tokens, lengths = pad_batch([token_lists[i] for i in rows])
                out = model.text.frozen_prefix(tokens.to(device), lengths.to(device)).cpu()
                for j, i in enumerate(rows):
                    parts[i] = out[j] if out.dim() == 2 else out[j, :lengths[j]]
        self.prefix = torch.stack(parts) if parts and parts[0].dim() == 1 else parts
        if path is not None:
            save_prefix(path, self.prefix)

    def encode(self, rows) -> torch.Tensor:
        tokens = [self.tokens[i] for i in rows]
        if self.prefix is None:
            padded, lengths = pad_batch(tokens)
            return self.model.text(padded.to(self.device), lengths)
        lengths = torch.tensor([max(len(t), 1) for t in tokens])
        if isinstance(self.prefix, torch.Tensor):
            return self.model.text.forward_from_prefix(self.prefix[torch.as_tensor(rows)].to(self.device), lengths)
        from torch.nn.utils.rnn import pad_sequence

        padded = pad_sequence([self.prefix[i] for i in rows], batch_first=True).to(self.device)
        return self.model.text.forward_from_prefix(padded, lengths)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


@torch.no_grad()
def encode_split(model: JointModel, features: np.ndarray, tokens, batch: int = 1000):
    """tokens: caption id lists, or a TextInputs over them."""
    model.eval()
    device = next(model.parameters()).device
    inputs = tokens if isinstance(tokens, TextInputs) else TextInputs(model, tokens, device)
    images = torch.cat([model.image(torch.from_numpy(np.asarray(features[s:s + batch])).to(device))
                        for s in range(0, len(features), batch)])
    n = len(inputs.tokens)
    captions = [inputs.encode(range(s, min(s + batch, n))) for s in range(0, n, batch)]
    return images, torch.cat(captions)


@torch.no_grad()
def validate(model: JointModel, features: np.ndarray, tokens) -> dict:
    images, captions = encode_split(model, features, tokens)
    scores = torch.cat([model.similarity(images[s:s + 100], captions) for s in range(0, len(images), 100)])
    return evaluate_scores(scores.cpu().numpy())


def _save_best(model: JointModel, data: TrainData, cfg: TrainConfig, folder: Path, record: dict) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    weights = {k: v.detach().cpu().numpy() for k, v in model.export_tensors().items()}
    config = {"joint": model.config.to_dict(), "text": data.text_config(cfg), "features": data.feature_config,
              "training": {**cfg.to_dict(), **data.extra}, "metrics": record}
    setup = data.text_setup
    save_model(tmp, weights, data.vocab if setup is None else None, config, data.stats, data.train_captions,
               files=setup.files if setup else None, int8=data.int8)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def train(run_dir: Path | str, data: TrainData, cfg: TrainConfig, init_from: Path | None = None,
          device: str | None = None, sparse_gradients: bool | None = None) -> dict:
    """Train into run_dir; the best model by val rsum is run_dir/best. Returns its record.

    init_from: a model folder to start from (e.g. continue a finished run with another loss or lr).
    device: default CUDA when present, else CPU.
    sparse_gradients: the text side's lookup tables get sparse gradients (only the rows a batch used); default on
    with plain SGD, which then updates the same values, and off with Adam, which cannot take them."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state_path, best_dir, log_path = run_dir / "state.pt", run_dir / "best", run_dir / "log.jsonl"

    text_config = data.text_config(cfg)
    joint = JointConfig(vocab_size=len(data.vocab) if data.vocab else 0, image_dim=data.train_features.shape[1],
                        word_dim=cfg.word_dim if text_config["kind"] == "gru" else 0, embed_dim=cfg.embed_dim,
                        similarity=cfg.similarity, use_abs=cfg.use_abs, image_dropout=cfg.image_dropout,
                        text=None if data.text_setup is None else text_config, image_hidden=cfg.image_hidden,
                        image_bias=cfg.image_bias)
    torch.manual_seed(cfg.seed)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = JointModel(joint).to(device)
    if sparse_gradients is None:
        sparse_gradients = cfg.optimizer == "sgd"
    if sparse_gradients:
        use_sparse_gradients(model, cfg)
    if data.text_setup is not None and data.text_setup.init_tensors:
        model.text.encoder.import_tensors(data.text_setup.init_tensors, pretrained_only=True)
    rng = np.random.default_rng(cfg.seed)
    pretrained = set(data.text_setup.init_tensors) if data.text_setup else set()
    text_named = model.text.encoder.export_tensors()
    pretrained_ids = {id(t) for name, t in text_named.items() if name in pretrained}

    def make_optimizer(lr: float):
        trainable = [p for p in model.text.parameters() if p.requires_grad]
        groups = [{"params": [p for p in trainable if id(p) not in pretrained_ids], "weight_decay": 0.0},
                  {"params": model.image.parameters(), "weight_decay": cfg.weight_decay}]
        tuned = [p for p in trainable if id(p) in pretrained_ids]
        if tuned:
            groups.append({"params": tuned, "weight_decay": 0.0, "pretrained": True})
        if cfg.optimizer == "sgd":
            return torch.optim.SGD(groups, lr=lr)
        if cfg.optimizer != "adam":
            raise ValueError(f"optimizer must be 'adam' or 'sgd', not {cfg.optimizer!r}")
        return torch.optim.Adam(groups, lr=lr)

    phase_idx, epoch, best, bad_epochs = 0, 0, {"rsum": -1.0}, 0
    optimizer = make_optimizer(cfg.phases[0].lr)
    if state_path.is_file():
        state = load_state(state_path)
        # The stopping budget (epochs, patience) may change between runs, so a finished run can be continued with
        # a larger --epochs; anything that changes the training itself may not.
        # Settings added since a state was written take their defaults (a run from before them resumes).
        saved, saved_joint = TrainConfig.from_dict(state["config"]).to_dict(), JointConfig(**state["joint"]).to_dict()
        if _without_budget(saved) != _without_budget(cfg.to_dict()) or saved_joint != joint.to_dict():
            raise SystemExit(f"{run_dir} holds a run with other settings; use a new --run-dir or delete it")
        model.load_state_dict(state["model"])
        phase_idx, epoch, best, bad_epochs = state["phase"], state["epoch"], state["best"], state["bad_epochs"]
        optimizer = make_optimizer(cfg.phases[phase_idx].lr)
        optimizer.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        _log(f"resuming {run_dir}: phase {phase_idx + 1}, after epoch {epoch}, best val rsum {best['rsum']:.1f}")
    else:
        if best_dir.exists():
            shutil.rmtree(best_dir)
        if init_from is not None:
            load_weights(model, Path(init_from))
            _log(f"starting from {init_from}")

    n_images = len(data.train_features)
    per_image = len(data.train_tokens) // n_images
    t_prefix = time.time()
    prefix_dir = cache_root() / "text-prefix"
    train_text = TextInputs(model, data.train_tokens, device, cache_dir=prefix_dir)
    val_text = TextInputs(model, data.val_tokens, device, cache_dir=prefix_dir)
    if train_text.prefix is not None:
        how = "read from the cache" if train_text.from_cache and val_text.from_cache else "computed once"
        _log(f"frozen text layers {how} for {len(data.train_tokens) + len(data.val_tokens)} captions "
             f"in {time.time() - t_prefix:.0f}s ({prefix_dir})")
    started, epochs_run = time.time(), 0
    while phase_idx < len(cfg.phases):
        phase = cfg.phases[phase_idx]
        if epoch >= cfg.max_epochs or bad_epochs >= cfg.patience:
            # Phase over: the next one starts from this phase's best model (curriculum).
            phase_idx, epoch, bad_epochs = phase_idx + 1, 0, 0
            if phase_idx < len(cfg.phases):
                load_weights(model, best_dir)
                optimizer = make_optimizer(cfg.phases[phase_idx].lr)
                _log(f"phase {phase_idx + 1}: {cfg.phases[phase_idx].loss} loss from the best phase-{phase_idx} model")
            continue

        lr = phase_lr(cfg, phase.lr, epoch)
        for group in optimizer.param_groups:
            group["lr"] = (cfg.text_lr * lr / phase.lr) if group.get("pretrained") and cfg.text_lr else lr
        t0 = time.time()
        model.train()
        pairs = epoch_pairs(rng, n_images, per_image, cfg.captions_per_image)
        total_loss = 0.0
        for s in range(0, len(pairs), cfg.batch_size):
            batch = pairs[s:s + cfg.batch_size]
            if len(batch) < 2:
                continue
            feats = torch.from_numpy(batch_rows(data.train_features, data.train_views, batch[:, 0], rng)).to(device)
            scores = model.similarity(model.image(feats), train_text.encode(batch[:, 1]))
            also_positive = matching_pairs(batch[:, 0], data.train_groups, cfg.captions_per_image)
            # a kind's regulariser (RCN eq. 15), left by its forward pass
            loss = training_loss(scores, phase.loss, cfg, also_positive, getattr(model.text.encoder, "penalty", None))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            total_loss += loss.item()
        train_seconds = time.time() - t0
        epoch += 1
        epochs_run += 1
        result = validate(model, data.val_features, val_text)
        record = {"phase": phase_idx + 1, "loss_kind": phase.loss, "epoch": epoch, "train_loss": total_loss,
                  "train_seconds": round(train_seconds, 2), "lr": lr, "val": result, "rsum": result["rsum"]}
        if result["rsum"] > best["rsum"]:
            best, bad_epochs = record, 0
            _save_best(model, data, cfg, best_dir, record)
        else:
            bad_epochs += 1
        if cfg.average_best > 1:
            keep_snapshot(model, run_dir, phase_idx, epoch, result["rsum"], cfg.average_best)
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        atomic_torch_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "phase": phase_idx,
                            "epoch": epoch, "best": best, "bad_epochs": bad_epochs, "config": cfg.to_dict(),
                            "joint": joint.to_dict(), "rng": rng.bit_generator.state,
                            "torch_rng": torch.get_rng_state()}, state_path)
        per_epoch = (time.time() - started) / epochs_run
        left = sum(cfg.max_epochs for _ in cfg.phases[phase_idx + 1:]) + cfg.max_epochs - epoch
        _log(f"phase {phase_idx + 1}/{len(cfg.phases)} ({phase.loss}) epoch {epoch:3d}  loss {total_loss:9.2f}  "
             f"val rsum {result['rsum']:6.1f} (best {best['rsum']:.1f} @ phase {best['phase']} epoch {best['epoch']})  "
             f"{per_epoch:.0f}s/epoch  ETA <= {_fmt_time(left * per_epoch)} (early stop: {cfg.patience - bad_epochs} "
             f"epochs of patience left)")
    if cfg.average_best > 1 and not average_is_current(run_dir):
        best = _average_snapshots(model, data, cfg, run_dir, best, val_text)
    _log(f"done: best val rsum {best['rsum']:.1f} (phase {best['phase']} epoch {best['epoch']}) -> {best_dir}")
    return best


def _average_snapshots(model: JointModel, data: TrainData, cfg: TrainConfig, run_dir: Path, best: dict,
                       val_text: TextInputs) -> dict:
    """Average the kept epochs' weights (a cheap ensemble, as in stochastic weight averaging); the average
    replaces the best model only when its val rsum is higher."""
    snaps = load_snapshots(run_dir)
    if len(snaps) < 2:
        return best
    load_weights(model, run_dir / "best")  # frozen weights are the same in every epoch
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name in snaps[0]["state"]:
            params[name].copy_(torch.stack([s["state"][name] for s in snaps]).mean(0).to(params[name].device))
    result = validate(model, data.val_features, val_text)
    epochs = sorted(s["epoch"] for s in snaps)
    record = {**best, "epoch": epochs[-1], "averaged_epochs": epochs, "val": result, "rsum": result["rsum"]}
    (run_dir / "averaged.json").write_text(json.dumps(record))
    _log(f"average of epochs {epochs}: val rsum {result['rsum']:.1f} (best single epoch {best['rsum']:.1f})")
    if result["rsum"] > best["rsum"]:
        _save_best(model, data, cfg, run_dir / "best", record)
        return record
    return best


def use_sparse_gradients(model: JointModel, cfg: TrainConfig) -> None:
    """Give the text side's embedding tables sparse gradients. A dense gradient of the thesis bigram MLP's
    50,000 x 1,000 first layer is written, zeroed and applied in full every step although a batch reads a few
    thousand rows; sparse, an epoch costs 3-4x less (bench/train_speed.py --thesis) for the same update."""
    if cfg.optimizer != "sgd":
        raise ValueError(f"sparse gradients need plain SGD; {cfg.optimizer!r} cannot take them")
    for module in model.text.modules():
        if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
            module.sparse = True


def training_loss(scores: torch.Tensor, loss_kind: str, cfg: TrainConfig, also_positive=None, penalty=None
                  ) -> torch.Tensor:
    """A batch's loss: the phase's ranking loss ("single": the thesis's one negative, "sum"/"max" of hinges) plus
    the text encoder's regulariser when it has one."""
    if loss_kind == "single":
        loss = single_negative_loss(scores, cfg.margin, cfg.negatives, also_positive)
    else:
        loss = hinge_loss(scores, cfg.margin, loss_kind, also_positive)
    return loss if penalty is None else loss + penalty


def matching_pairs(images: np.ndarray, groups: np.ndarray | None, captions_per_image: str):
    """(B, B) mask of a batch's pairs that match although off the diagonal, or None: with five captions per
    epoch two captions of one image can share a batch, and two images of one group (photos of one category,
    captioned alike) match each other. Neither is used as a negative."""
    if groups is not None:
        return same_image_mask(groups[images])
    return same_image_mask(images) if captions_per_image == "all" else None


def epoch_pairs(rng: np.random.Generator, n_images: int, per_image: int, captions_per_image: str) -> np.ndarray:
    """An epoch's (image, caption) rows in a random order: "one" = every image once with one of its captions
    drawn at random (the FNE paper), "all" = every caption once with its image (the thesis)."""
    if captions_per_image == "one":
        images = rng.permutation(n_images)
        return np.stack([images, images * per_image + rng.integers(0, per_image, n_images)], 1)
    captions = rng.permutation(n_images * per_image)
    return np.stack([captions // per_image, captions], 1)


def phase_lr(cfg: TrainConfig, base: float, epoch: int) -> float:
    """The lr of a phase's epoch `epoch` (0-based): divided by 10 after cfg.lr_decay_epochs, or (thesis) falling
    linearly from `base` to base / 100 over cfg.linear_decay_epochs epochs, then staying there."""
    if cfg.linear_decay_epochs:
        return base * (1.0 - 0.99 * min(epoch, cfg.linear_decay_epochs) / cfg.linear_decay_epochs)
    return base / 10 if cfg.lr_decay_epochs and epoch >= cfg.lr_decay_epochs else base


def _without_budget(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("max_epochs", "patience")}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
