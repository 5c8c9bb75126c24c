"""model.json's structure and the weights' shapes, checked when a model loads: a bad or hostile file fails in
one line, at once, not after half a minute of CNN work or at the first query."""
from __future__ import annotations

from pathlib import Path

from imgtxt.errors import ModelError

from . import concepts, text_encoders

# backbones.BACKBONE_NAMES, repeated so that loading a model never imports torch (a test keeps them equal)
BACKBONE_NAMES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "vgg16", "resnet50", "resnet152")
_INT, _STR, _BOOL = (int,), (str,), (bool,)
CONFIG_SCHEMA = {   # section -> key -> accepted types; checked at load so a bad file fails in one line, at once
    "joint": {"embed_dim": _INT, "image_dim": _INT, "similarity": _STR, "use_abs": _BOOL},
    "features": {"kind": _STR, "backbone": _STR, "backbone_id": _STR, "layer_set": _STR, "crops": _INT,
                 "precision": _STR, "raw_dim": _INT, "baseline_slice": (list,)},
}


def check_config(config, where: Path) -> None:
    """model.json's structure and values, before anything is computed from them."""
    if not isinstance(config, dict):
        raise ModelError(f"{where}: model.json must hold an object")
    for section, keys in CONFIG_SCHEMA.items():
        if not isinstance(config.get(section), dict):
            raise ModelError(f"{where}: model.json lacks the {section!r} section")
        for key, types in keys.items():
            value = config[section].get(key)
            if key not in config[section]:
                raise ModelError(f"{where}: model.json lacks {section}.{key}")
            if not isinstance(value, types) or (types is _INT and isinstance(value, bool)):
                raise ModelError(f"{where}: model.json {section}.{key} has the wrong type ({value!r})")
    joint, features = config["joint"], config["features"]
    hidden, bias = joint.get("image_hidden", 0), joint.get("image_bias", False)
    if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 0 or not isinstance(bias, bool):
        raise ModelError(f"{where}: model.json joint.image_hidden must be a size >= 0 and joint.image_bias true or "
                         f"false ({hidden!r}, {bias!r})")
    if joint["similarity"] not in ("cosine", "order"):
        raise ModelError(f"{where}: model.json joint.similarity must be cosine or order, not {joint['similarity']!r}")
    if min(joint["embed_dim"], joint["image_dim"], features["raw_dim"], features["crops"]) < 1:
        raise ModelError(f"{where}: model.json has a size below 1")
    if features["kind"] not in ("fne", "baseline"):
        raise ModelError(f"{where}: model.json features.kind must be fne or baseline, not {features['kind']!r}")
    if features["backbone"] not in BACKBONE_NAMES:
        raise ModelError(f"{where}: unknown backbone {features['backbone']!r} in model.json; known: "
                         f"{', '.join(BACKBONE_NAMES)}")
    if "@" not in features["backbone_id"]:
        raise ModelError(f"{where}: model.json features.backbone_id must be NAME@WEIGHTS")
    start_stop = features["baseline_slice"]
    if len(start_stop) != 2 or not all(isinstance(v, int) for v in start_stop) or \
            not 0 <= start_stop[0] < start_stop[1] <= features["raw_dim"]:
        raise ModelError(f"{where}: model.json features.baseline_slice must be [start, stop] within raw_dim")
    expected = features["raw_dim"] if features["kind"] == "fne" else start_stop[1] - start_stop[0]
    if joint["image_dim"] != expected:
        raise ModelError(f"{where}: model.json joint.image_dim {joint['image_dim']} does not match its features "
                         f"({expected})")
    if not isinstance(config.get("name", ""), str):
        raise ModelError(f"{where}: model.json name must be a string")
    if "concepts" in config:
        reason = concepts.check_config(config["concepts"])
        if reason is None and config["concepts"]["raw_slice"][1] > features["raw_dim"]:
            reason = "concepts.raw_slice lies outside the raw features"
        if reason is None and text_encoders.text_config_of(config).get("kind") != "minilm":
            reason = "concepts need a sentence encoder (text kind minilm)"
        if reason:
            raise ModelError(f"{where}: model.json {reason}")


def check_shapes(tensors, config: dict, path: Path) -> None:
    """The image side's, the GRU's and the text kinds' declared weight shapes against model.json, at load: not
    after half a minute of CNN work or at the first query (int8 matrices' row scales too)."""
    joint, raw_dim = config["joint"], config["features"]["raw_dim"]
    h = joint["embed_dim"]
    hidden = joint.get("image_hidden") or 0
    expected = {"image_projection": (h, hidden or joint["image_dim"]), "fne.mean": (raw_dim,), "fne.std": (raw_dim,)}
    if hidden:
        expected.update({"image_hidden.weight": (hidden, joint["image_dim"]), "image_hidden.bias": (hidden,)})
    if joint.get("image_bias"):
        expected["image_bias"] = (h,)
    text_config = text_encoders.text_config_of(config)
    if text_config["kind"] == "gru" and joint.get("word_dim"):
        w = joint["word_dim"]
        expected.update({"gru.weight_ih": (3 * h, w), "gru.weight_hh": (3 * h, h), "gru.bias_ih": (3 * h,),
                         "gru.bias_hh": (3 * h,)})
    expected.update(text_encoders.tensor_shapes(text_config, h))
    if "concepts" in config:
        missing = [n for n in concepts.TENSOR_NAMES if n not in tensors]
        if missing:
            raise ModelError(f"{path}: model.json has a concepts section but the tensors {missing} are missing")
        expected.update(concepts.tensor_shapes(config["concepts"]))
    for name, shape in expected.items():
        if name not in tensors:
            continue
        found = tensors.shape(name)
        if len(found) != len(shape) or any(s is not None and f != s for f, s in zip(found, shape)):
            said = tuple("any" if s is None else s for s in shape)
            raise ModelError(f"{path}: tensor {name} has shape {found}, model.json says {said}")
        if name + ".scale" in tensors and tensors.shape(name + ".scale") != found[:1]:
            raise ModelError(f"{path}: tensor {name}.scale has shape {tensors.shape(name + '.scale')}, "
                             f"expected {found[:1]}")
