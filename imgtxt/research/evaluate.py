"""Evaluate a trained model on a dataset split: R@1/5/10, Med r, mean r both ways, and rsum."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from imgtxt.model.modelfile import TrainedModel
from imgtxt.model.search_tuning import gate_queries

from .datasets import CAPTIONS_PER_IMAGE, load_split, protocol
from .metrics import evaluate_scores, mean_of_folds


RUNTIMES = ("index", "torch")


def evaluate_model(model: TrainedModel, dataset: str, data_dir: Path | str, split: str = "val",
                   save_embeddings: Path | str | None = None, quiet: bool = False,
                   backbone_weights: str | None = None, thesis: bool = False, ties: str = "expected",
                   runtime: str = "index") -> dict:
    """`runtime` "index": the photos through the CNN `imgtxt index` runs (the model's exported graph on OpenVINO
    or ONNX Runtime, at the model's precision), falling back to torch where no graph runs; "torch": the torch
    CNN, as training computes dataset features. Either's features are cached."""
    from .pipeline import FeatureSettings, raw_split_features

    if runtime not in RUNTIMES:
        raise ValueError(f"the eval runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    data = load_split(dataset, data_dir, split)
    f = model.features
    raw = index_features(model, data, quiet) if runtime == "index" and backbone_weights is None else None
    if raw is None:
        settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"], backbone_weights)
        raw, _ = raw_split_features(data, settings, quiet=quiet)
    images = model.encode_raw_images(raw)
    captions = model.encode_text(data.captions)
    if save_embeddings:
        out = Path(save_embeddings)
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "images.npy", images)
        np.save(out / "captions.npy", captions)

    result = {"dataset": dataset, "split": split, "images": len(data), "captions": len(data.captions)}
    scores = model.scores(images, captions)
    result.update(search_and_caption_scores(model, images, data.captions, captions, ties))
    if thesis:
        from .thesis_metrics import thesis_metrics

        result["thesis"] = thesis_metrics(scores, CAPTIONS_PER_IMAGE, ties)
    if dataset == "coco" and split == "test" and len(data) >= 5000:
        folds = []
        for k in range(5):
            im = images[1000 * k:1000 * (k + 1)]
            cap = captions[5000 * k:5000 * (k + 1)]
            folds.append(search_and_caption_scores(model, im, data.captions[5000 * k:5000 * (k + 1)], cap, ties))
        result["coco_1k"] = mean_of_folds(folds)
    result["protocol"] = protocol(dataset, split, len(data))
    result["model"] = model.model_id
    return result


class IndexGraphFeatures:
    """The CNN `imgtxt index` runs for `model`, with the extractor interface feature_cache needs."""

    def __init__(self, model, extractor):
        self.graph = extractor
        self.dim, self.resize_size = extractor.dim, extractor.resize_size
        self.layer_names, self.layer_dims = [], []   # (inside the graph: only its total width is known)
        self.baseline_slice = list(model.features["baseline_slice"])

    def __call__(self, squares: np.ndarray) -> np.ndarray:
        return self.graph.raw_features(squares)


def index_features(model: TrainedModel, data, quiet: bool = False) -> np.ndarray | None:
    """Raw features of a split through the model's exported graph as `imgtxt index` runs it (cached under their
    own key: "index-<runtime>-<precision>"), or None where no graph runs (then torch computes them)."""
    from imgtxt.model.cnn_runtime import onnx_embedder

    from .feature_cache import FeatureSpec, cached_features, compute_features

    embedder = onnx_embedder(model, notice=None if quiet else _say)
    if embedder is None:
        return None
    graph, f = embedder.extractor, model.features
    if not quiet:
        _say(f"imgtxt: {data.dataset} {data.name} photos through the CNN on {graph.device_line}")
    spec = FeatureSpec(f["backbone_id"], f["layer_set"], f["crops"], graph.precision, f"index-{graph.backend}")
    raw = cached_features(data.dataset, data, spec)
    if raw is None:
        raw = compute_features(data.dataset, data, IndexGraphFeatures(model, graph), spec, quiet=quiet)
    return raw


def _say(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def search_and_caption_scores(model: TrainedModel, images: np.ndarray, texts: list[str], captions: np.ndarray,
                               ties: str = "expected") -> dict:
    """Recall both ways as a user meets it: caption ranks a photo's captions with the caption vectors, search
    ranks photos for a sentence encoded as a query (the model's query gate, imgtxt.model.search_tuning)."""
    hubness = model.caption_hubness(len(model.caption_bank()))   # the caption side of a user's `caption`
    if hubness is None:
        scores = model.scores(images, captions)
    else:
        d = model.content_dim
        scores = model.scores(hubness.gate_photos(images[:, :d]), captions[:, :d])
        scores -= hubness.penalties(captions[:, :d])[None, :]
    result = evaluate_scores(scores, CAPTIONS_PER_IMAGE, ties)
    if not model.config.get("search", {}).get("query_gate"):
        return result
    # `captions` are `texts` encoded (encode_text): gated as queries, not encoded a second time
    t2i = evaluate_scores(model.scores(images, gate_queries(model, captions)), CAPTIONS_PER_IMAGE, ties)["t2i"]
    rsum = sum(result["i2t"][k] + t2i[k] for k in ("r1", "r5", "r10"))
    return {"i2t": result["i2t"], "t2i": t2i, "rsum": rsum}


def format_result(result: dict) -> str:
    def row(name: str, m: dict) -> str:
        return (f"{name:<5} R@1 {m['r1']:5.1f}  R@5 {m['r5']:5.1f}  R@10 {m['r10']:5.1f}  "
                f"Med r {m['medr']:4.0f}  mean r {m['meanr']:6.1f}")

    lines = [f"{result['protocol']}", f"model {result['model']}",
             row("i2t", result["i2t"]), row("t2i", result["t2i"]), f"rsum  {result['rsum']:.1f}"]
    if "coco_1k" in result:
        k = result["coco_1k"]
        lines += ["COCO 1k (mean of 5 folds):", row("i2t", k["i2t"]), row("t2i", k["t2i"]), f"rsum  {k['rsum']:.1f}"]
    if "thesis" in result:
        from .thesis_metrics import format_thesis

        lines.append(format_thesis(result["thesis"]))
    return "\n".join(lines)
