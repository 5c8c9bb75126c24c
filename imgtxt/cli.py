"""The `imgtxt` command line.

Imports are deferred into each command so that query commands (`search`, `status`) start without
loading torch; only commands that run a CNN or train import it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    help="Search a photo folder by sentence and caption photos, with a Full-Network-Embedding "
         "joint image-text model. Works offline.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)

DATA_DIR_HELP = "Dataset folder: dataset_<name>.json (Karpathy format) and the images. Env: IMGTXT_DATA_DIR."
DataDir = typer.Option(None, "--data-dir", envvar="IMGTXT_DATA_DIR", help=DATA_DIR_HELP)
ModelOpt = typer.Option(None, "--model", help="Model folder (default: the shipped model in weights/default).")


def fail(message: str, code: int = 1) -> None:
    """One-line reason on stderr, non-zero exit."""
    typer.echo(f"imgtxt: {message}", err=True)
    raise typer.Exit(code)


def _need_data_dir(data_dir: Optional[Path], dataset: str) -> Path:
    if data_dir is None:
        fail(f"where is {dataset}? pass --data-dir DIR or set IMGTXT_DATA_DIR", 2)
    return data_dir


def _check_dataset(dataset: str) -> str:
    from .datasets import DATASETS

    if dataset not in DATASETS:
        fail(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}", 2)
    return dataset


def load_model(path: Optional[Path]):
    from .modelfile import ModelError, TrainedModel

    try:
        return TrainedModel.load(path)
    except ModelError as e:
        fail(f"unusable model: {e}")


# ------------------------------------------------------------------------------------- datasets

@app.command()
def features(
    dataset: str = typer.Argument(..., help="flickr8k, flickr30k or coco"),
    data_dir: Optional[Path] = DataDir,
    splits: str = typer.Option("train,val", "--splits", help="Comma-separated splits to compute."),
    backbone: str = typer.Option("efficientnet_lite0", help="efficientnet_lite0/1/2, vgg16, resnet50, resnet152"),
    layer_set: str = typer.Option("all", help="'all' = every conv layer; 'blocks' = block outputs (EfficientNet)"),
    crops: int = typer.Option(1, help="1 (centre crop) or 10 (corners + centre, mirrored)"),
    precision: str = typer.Option("auto", help="auto (bf16 on CPU / fp16 on CUDA) or fp32"),
    backbone_weights: Optional[str] = typer.Option(None, help="Local weights file for the backbone, or 'random'."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    """Compute raw CNN features of a dataset once, into the cache (resumes after an interruption)."""
    from .backbones import BackboneError
    from .datasets import DatasetError, load_split
    from .feature_cache import FeatureSpec, cache_root
    from .pipeline import FeatureSettings, open_extractor, raw_split_features

    data_dir = _need_data_dir(data_dir, _check_dataset(dataset))
    settings = FeatureSettings(backbone, layer_set, crops, precision, backbone_weights)
    try:
        loaded = [load_split(dataset, data_dir, s.strip()) for s in splits.split(",") if s.strip()]
        extractor = open_extractor(settings)
        for split in loaded:
            raw, _ = raw_split_features(split, settings, extractor=extractor, quiet=quiet)
            typer.echo(f"{dataset} {split.name}: {raw.shape[0]} images x {raw.shape[1]} features", err=True)
    except (DatasetError, BackboneError, ValueError) as e:
        fail(str(e))
    spec = FeatureSpec(extractor.backbone.id, layer_set, crops, precision)
    typer.echo(str(cache_root() / dataset / spec.key))


@app.command()
def train(
    dataset: str = typer.Argument(..., help="flickr8k, flickr30k or coco"),
    data_dir: Optional[Path] = DataDir,
    preset: str = typer.Option("PH", help="FNE paper Table 1: SH, MH, SOE, MOE, PH (sum->max), POE"),
    feature_kind: str = typer.Option("fne", "--features", help="fne (full network) or baseline (one layer)"),
    backbone: str = typer.Option("efficientnet_lite0"),
    layer_set: str = typer.Option("all"),
    crops: int = typer.Option(1),
    precision: str = typer.Option("auto"),
    backbone_weights: Optional[str] = typer.Option(None),
    embed_dim: Optional[int] = typer.Option(None, help="Joint space size (preset: paper's)"),
    word_dim: Optional[int] = typer.Option(None, help="Word embedding size (preset: paper's)"),
    image_dropout: float = typer.Option(0.0, help="Dropout on the image features"),
    weight_decay: float = typer.Option(0.0, help="L2 penalty on the image projection"),
    epochs: int = typer.Option(200, help="Maximum epochs per phase"),
    patience: int = typer.Option(10, help="End a phase after this many epochs without a better val rsum"),
    captions: str = typer.Option("one", help="'one' random caption per image per epoch (paper) or 'all' five"),
    lr: Optional[float] = typer.Option(None, help="Learning rate for every phase (preset: paper's)"),
    min_count: int = typer.Option(2, help="Words rarer than this in training captions become <unk>"),
    seed: int = typer.Option(0),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads"),
    run_dir: Path = typer.Option(Path("runs/latest"), help="Checkpoints and log; rerun to resume"),
    output: Optional[Path] = typer.Option(None, help="Copy the best model here when done"),
):
    """Train the joint text-image space on a dataset's train split, selecting by val rsum."""
    import shutil

    import torch

    from .backbones import BackboneError
    from .datasets import DatasetError
    from .pipeline import FeatureSettings, build_training_data
    from .train import preset as make_preset
    from .train import train as run_training

    data_dir = _need_data_dir(data_dir, _check_dataset(dataset))
    if threads:
        torch.set_num_threads(threads)
    if captions not in ("one", "all"):
        fail("--captions must be 'one' or 'all'", 2)
    try:
        cfg = make_preset(preset, embed_dim=embed_dim, word_dim=word_dim, image_dropout=image_dropout,
                          weight_decay=weight_decay, max_epochs=epochs, patience=patience,
                          captions_per_image=captions, seed=seed)
        if lr is not None:
            for phase in cfg.phases:
                phase.lr = lr
        data = build_training_data(dataset, data_dir, feature_kind,
                                   FeatureSettings(backbone, layer_set, crops, precision, backbone_weights),
                                   min_count=min_count)
    except (DatasetError, BackboneError, ValueError) as e:
        fail(str(e))
    typer.echo(f"training {preset.upper()} on {feature_kind} features {data.train_features.shape}, "
               f"vocabulary {len(data.vocab)} words -> {run_dir}", err=True)
    best = run_training(run_dir, data, cfg)
    if output:
        shutil.rmtree(output, ignore_errors=True)
        shutil.copytree(run_dir / "best", output)
        typer.echo(f"best model (val rsum {best['rsum']:.1f}) copied to {output}", err=True)
    typer.echo(str(run_dir / "best"))


@app.command("eval")
def evaluate(
    dataset: str = typer.Argument(..., help="flickr8k, flickr30k or coco"),
    data_dir: Optional[Path] = DataDir,
    split: str = typer.Option("val", help="val or test"),
    model: Optional[Path] = ModelOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else on stdout"),
    save_embeddings: Optional[Path] = typer.Option(None, help="Write images.npy and captions.npy here"),
    backbone_weights: Optional[str] = typer.Option(None),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    """Image annotation (i2t) and retrieval (t2i) recall of a model on a dataset split."""
    from .backbones import BackboneError
    from .datasets import DatasetError
    from .evaluate import evaluate_model, format_result
    from .images import ImageError

    data_dir = _need_data_dir(data_dir, _check_dataset(dataset))
    if split not in ("val", "test", "train"):
        fail("--split must be val or test", 2)
    trained = load_model(model)
    try:
        result = evaluate_model(trained, dataset, data_dir, split, save_embeddings, quiet=quiet or as_json,
                                backbone_weights=backbone_weights)
    except (DatasetError, BackboneError, ImageError) as e:
        fail(str(e))
    if as_json:
        keys = ("dataset", "split", "images", "captions", "i2t", "t2i", "rsum")
        out = {k: result[k] for k in keys}
        if "coco_1k" in result:
            out["coco_1k"] = result["coco_1k"]
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        typer.echo(format_result(result))


@app.command("backbone-download")
def backbone_download(name: str = typer.Argument(..., help="vgg16, resnet50 or resnet152")):
    """Download torchvision ImageNet weights into torch's cache (the only command that uses the network)."""
    from .backbones import BackboneError, download_weights

    try:
        path = download_weights(name)
    except BackboneError as e:
        fail(str(e))
    typer.echo(str(path))


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
