"""Give a trained model the ConSE bridge (imgtxt.model.concepts): the backbone's ImageNet classifier, the
sentence vectors of the 1,000 class names, and the fusion weights chosen on a validation split.

Class names come from timm's ImageNet metadata (WordNet lemmas, e.g. "coffee mug", "espresso"). A class's
vector is "a photo of a <first lemma>" (the mean over LEMMAS_PER_CLASS lemmas) through the model's own sentence
encoder, and the caption bank gains one caption per class ("A photo of a sorrel."), so `imgtxt caption` can name
everyday things. `class_text="definitions"` uses "A photo of a <first lemma>, <its WordNet definition>." for
both instead ("A photo of a sorrel, a horse of a brownish orange to light brown color."): a name alone is matched
by its letters as much as by its meaning ("a photo of a horse" is nearest "horse cart", "a sheep" the
sheepdogs), the definition says what the thing is. Measured in docs/results.md: names reach the right classes
far more often with definitions, but val, the object dev set and the README's captions do not improve.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from imgtxt.errors import ModelError
from imgtxt.model import concepts
from imgtxt.model.modelfile import (
    IMAGE_PROJECTION,
    TrainedModel,
    image_tensor_names,
    save_model,
)
from imgtxt.model.text_encoders import tensor_names, text_config_of

from .datasets import CAPTIONS_PER_IMAGE, load_split
from .metrics import evaluate_scores

TEMPLATE = "a photo of a {}"
DEFINED_TEMPLATE = "A photo of a {}, {}."   # the class's caption-bank line is its text too
LEMMAS_PER_CLASS = 1   # names alone: the first lemma beat the mean of the first three on val (docs/results.md)
CLASS_TEXTS = ("definitions", "names")
FITTED_ON_TOP = ("search", "calibration", "caption_hubness", "caption_vectors", "eval_val")
WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
CONFIDENCE_WEIGHTS = (0.0, 0.1, 0.2, 0.3)


def class_lemmas() -> list[list[str]]:
    """The 1,000 ImageNet classes in the classifier's order, each as its WordNet lemmas."""
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    return [[w.strip() for w in info.index_to_description(i).split(",") if w.strip()]
            for i in range(info.num_classes())]


def class_definitions() -> list[str]:
    """The 1,000 classes' WordNet definitions (glosses), in the classifier's order."""
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    return [info.index_to_description(i, detailed=True).split(": ", 1)[-1].strip() for i in range(info.num_classes())]


def class_texts(lemmas: list[list[str]], definitions: list[str] | None) -> tuple[list[str], list[int]]:
    """The texts whose sentence vectors make the class vectors, and the class of each: each class's defined
    caption (class_captions), or the first LEMMAS_PER_CLASS names alone (definitions None)."""
    if definitions is not None:
        return class_captions(lemmas, definitions), list(range(len(lemmas)))
    texts, owner = [], []
    for i, names in enumerate(lemmas):
        for name in names[:LEMMAS_PER_CLASS]:
            texts.append(TEMPLATE.format(name))
            owner.append(i)
    return texts, owner


def class_captions(lemmas: list[list[str]], definitions: list[str] | None = None) -> list[str]:
    """One caption-bank line per class: "A photo of a coffee mug." or, with the definitions, "A photo of an
    espresso, strong black coffee brewed by forcing hot water under pressure through finely ground coffee
    beans." (then the same text makes the class vector, so a photo's top class and its caption agree)."""
    out = []
    for i, names in enumerate(lemmas):
        article = "an" if names[0][:1].lower() in "aeiou" else "a"
        out.append(f"A photo of {article} {names[0]}, {definitions[i].rstrip('.')}." if definitions is not None
                   else f"A photo of {article} {names[0]}.")
    return out


def bank_with_classes(bank: list[str], old_class_lines: set[str], class_lines: list[str]) -> list[str]:
    """The caption bank without any earlier class lines, then the class lines; each line once (a training set
    that captions one category's photos alike repeats its lines hundreds of times)."""
    return list(dict.fromkeys([c for c in bank if c not in old_class_lines] + class_lines))


def model_class_captions(model: TrainedModel) -> list[str]:
    """The caption-bank lines add-concepts wrote for this model's classes (none without a ConSE bridge)."""
    section = model.config.get("concepts")
    if section is None:
        return []
    lemmas = class_lemmas()
    return class_captions(lemmas, class_definitions() if section.get("class_text") == DEFINED_TEMPLATE else None)


def class_vectors(model: TrainedModel, lemmas: list[list[str]], definitions: list[str] | None = None) -> np.ndarray:
    """(classes, text_dim): the mean sentence vector of each class's texts (class_texts), L2-normalised."""
    texts, owner = class_texts(lemmas, definitions)
    text = model.text
    sentences = np.concatenate([text.encode_with_sentence([text.tokenize(t) for t in texts[s:s + 256]])[1]
                                for s in range(0, len(texts), 256)])
    out = np.zeros((len(lemmas), sentences.shape[1]), np.float64)
    np.add.at(out, np.array(owner), sentences)
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def classifier_of(model: TrainedModel, backbone_weights: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The backbone's own ImageNet classifier (weight (classes, width), bias); it reads the pooled last layer."""
    from imgtxt.model.backbones import load_backbone

    f = model.features
    backbone = load_backbone(f["backbone"], backbone_weights)
    if backbone.id != f["backbone_id"]:
        raise ModelError(f"the model was trained on {f['backbone_id']} features, this backbone is {backbone.id}")
    head = getattr(backbone.net, "classifier", None)
    start, stop = f["baseline_slice"]
    if head is None or not hasattr(head, "weight") or head.weight.shape[1] != stop - start:
        raise ModelError(f"{f['backbone']}: no linear ImageNet classifier on its last pooled layer")
    return head.weight.detach().numpy().astype(np.float32), head.bias.detach().numpy().astype(np.float32)


def choose_weights(model: TrainedModel, bridge: concepts.ConceptBridge, raw_val: np.ndarray,
                   captions: list[str], tolerance: float = 0.5, log=print) -> tuple[float, float, list[dict]]:
    """Val rsum for each (weight, confidence_weight); returns the setting that gives the ConSE part the most
    say among those within `tolerance` rsum of the best (everyday objects need it; val barely does)."""
    h = model.config["joint"]["embed_dim"]
    joint_images = model.encode_image_features(model.image_features(raw_val))
    text = model.encode_text(captions, bridge=bridge)   # the model may have no bridge yet, or an old one
    joint_scores = joint_images @ text[:, :h].T
    top1 = bridge.class_probabilities(raw_val).max(axis=1)
    rows = []
    for w in WEIGHTS:
        for cw in CONFIDENCE_WEIGHTS:
            if w == 0 and cw == 0 and rows:
                continue
            part = bridge.photo_part(raw_val, weight=w, confidence_weight=cw)
            result = evaluate_scores(joint_scores + part @ text[:, h:].T, CAPTIONS_PER_IMAGE)
            rows.append({"weight": w, "confidence_weight": cw, "rsum": round(float(result["rsum"]), 2),
                         "i2t": [round(float(result["i2t"][k]), 1) for k in ("r1", "r5", "r10")],
                         "t2i": [round(float(result["t2i"][k]), 1) for k in ("r1", "r5", "r10")],
                         "mean_scale": round(float(w + cw * top1.mean()), 3)})
            log(f"weight {w:.2f} + {cw:.2f} x confidence: val rsum {rows[-1]['rsum']:.2f}")
    chosen = most_conse_say(rows, tolerance)
    return chosen["weight"], chosen["confidence_weight"], rows


def most_conse_say(rows: list[dict], tolerance: float = 0.5) -> dict:
    """The selection rule of choose_weights: among the rows within `tolerance` of the best val rsum, the one with
    the largest mean ConSE scale (weight + confidence_weight x the mean top-1 probability); the higher rsum on a
    tie."""
    best = max(r["rsum"] for r in rows)
    return max((r for r in rows if r["rsum"] >= best - tolerance), key=lambda r: (r["mean_scale"], r["rsum"]))


def add_concepts(model_dir: Path | str, out: Path | str, dataset: str, data_dir: Path | str,
                 top_k: int = 10, backbone_weights: str | None = None, quiet: bool = False,
                 class_text: str = "names") -> dict:
    """Write `out`: the model of `model_dir` with the ConSE bridge, its fusion weights chosen on val, and the
    class captions appended to its caption bank. A model that has a bridge already gets a new one, and loses
    what was fitted on top of the old (search corrections, calibration, caption hubness, stored caption
    vectors: fit them again). Returns the val table."""
    from imgtxt.model.cnn_torch import FeatureSettings

    from .pipeline import raw_split_features

    log = (lambda *a: None) if quiet else (lambda m: print(m, file=sys.stderr))
    model = TrainedModel.load(model_dir)
    for key in FITTED_ON_TOP:   # fitted to the old bridge's vectors, if any: stale with the new one
        model.config.pop(key, None)
    if text_config_of(model.config).get("kind") != "minilm":
        raise ModelError(f"{model.folder}: the ConSE bridge needs a sentence encoder (text kind minilm)")
    weight, bias = classifier_of(model, backbone_weights)
    if class_text not in CLASS_TEXTS:
        raise ValueError(f"class_text must be one of {', '.join(CLASS_TEXTS)}, not {class_text!r}")
    lemmas = class_lemmas()
    if len(lemmas) != weight.shape[0]:
        raise ModelError(f"the classifier has {weight.shape[0]} classes, the class names {len(lemmas)}")
    all_definitions = class_definitions()
    definitions = all_definitions if class_text == "definitions" else None
    vectors = class_vectors(model, lemmas, definitions)
    f = model.features
    config = {"kind": "conse", "top_k": top_k, "weight": 0.0, "confidence_weight": 0.0,
              "raw_slice": list(f["baseline_slice"]), "classes": len(lemmas), "text_dim": int(vectors.shape[1]),
              "class_names": "timm ImageNetInfo (WordNet lemmas" + (" and definitions)" if definitions else ")"),
              "class_text": DEFINED_TEMPLATE if definitions else TEMPLATE,
              "lemmas_per_class": 1 if definitions else LEMMAS_PER_CLASS}
    tensors = {concepts.WEIGHT: weight, concepts.BIAS: bias, concepts.CLASS_VECTORS: vectors}
    bridge = concepts.ConceptBridge(config, tensors)
    val = load_split(dataset, data_dir, "val")
    settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"], backbone_weights,
                               f.get("feature_runtime", "torch"))
    raw_val, _ = raw_split_features(val, settings, quiet=quiet)
    chosen_w, chosen_cw, rows = choose_weights(model, bridge, raw_val, val.captions, log=log)
    config.update(weight=chosen_w, confidence_weight=chosen_cw, chosen_on=f"{dataset} val rsum", table=rows)
    new = {k: v for k, v in model.config.items() if k not in ("format", "version", "weights_sha256")}
    new["concepts"] = config
    names = tensor_names(text_config_of(new)) + image_tensor_names(new["joint"])
    stored = {n: np.asarray(model.tensors[n], dtype=np.float32) for n in names}
    # int8 with per-row scales for the big matrices, as the shipped models store them (fp16 for the rest)
    int8 = tuple(n for n in names if len(stored[n].shape) == 2
                 and (n == IMAGE_PROJECTION or n.startswith(("minilm.", "text_head."))))
    files = {n: (model.folder / n).read_bytes() for n in ("vocab.json", "tokenizer.json")
             if (model.folder / n).is_file()}
    old = set(class_captions(lemmas)) | set(class_captions(lemmas, all_definitions))   # either kind, if any
    bank = bank_with_classes(model.caption_bank(), old, class_captions(lemmas, definitions))
    save_model(out, stored, None, new, model.stats, bank, files=files, int8=int8, extra=tensors)
    log(f"chose weight {chosen_w} + {chosen_cw} x confidence -> {out}")
    return {"weight": chosen_w, "confidence_weight": chosen_cw, "table": rows}
