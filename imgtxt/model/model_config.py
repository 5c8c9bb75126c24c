"""model.json and the weights, checked when a model loads: every setting the runtime reads has its type and
range checked here (a hostile or damaged model folder is one ModelError line at load, not an error deep in numpy at
the first query or after minutes of CNN work), and the weights are checked against model.json's weights_sha256 (the
model id), hashed once per change of the file."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from imgtxt.errors import ModelError

from . import concepts, text_encoders
from .fne import CROPS
from .json_file import read_json

# backbones.BACKBONES, repeated so that loading a model never imports torch (a test keeps them equal)
BACKBONE_NAMES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "vgg16", "resnet50", "resnet152")
_INT, _STR, _BOOL = (int,), (str,), (bool,)
PRECISIONS = ("auto", "fp32", "fp16", "bf16")   # the CNN's (fne.RawFeatureExtractor); the exported graph is fp32
CONFIG_SCHEMA = {   # section -> key -> accepted types; checked at load so a bad file fails in one line, at once
    "joint": {"embed_dim": _INT, "image_dim": _INT, "similarity": _STR, "use_abs": _BOOL},
    "features": {"kind": _STR, "backbone": _STR, "backbone_id": _STR, "layer_set": _STR, "crops": _INT,
                 "precision": _STR, "raw_dim": _INT, "baseline_slice": (list,)},
}


def safe_name(name: str) -> str:
    """A model name as it may appear in a file name: no separators, no leading dots, nothing odd."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")[:64] or "model"


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
    if features["crops"] not in CROPS:
        raise ModelError(f"{where}: model.json features.crops must be 1 or 10, not {features['crops']}")
    layer_sets = ("all", "blocks") if features["backbone"].startswith("efficientnet_lite") else ("all",)
    if features["layer_set"] not in layer_sets:
        raise ModelError(f"{where}: model.json features.layer_set must be {' or '.join(layer_sets)} for "
                         f"{features['backbone']}, not {features['layer_set'][:40]!r}")
    if features["precision"] not in PRECISIONS:
        raise ModelError(f"{where}: model.json features.precision must be {', '.join(PRECISIONS)}, not "
                         f"{features['precision'][:40]!r}")
    for key in ("weights_sha256", "photo_settings_sha256"):
        digest = config.get(key)
        if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise ModelError(f"{where}: model.json {key} must be 64 hex digits")
    if "text" not in config:
        for key in ("vocab_size", "word_dim"):   # a GRU described by "joint" (models before text kinds)
            if not text_encoders.positive_int(joint.get(key)):
                raise ModelError(f"{where}: model.json joint.{key} must be an integer of at least 1")
    reason = text_encoders.check_settings(config.get("text", {"kind": "gru"}))
    if reason:
        raise ModelError(f"{where}: model.json {reason}")
    if "concepts" in config:
        reason = concepts.check_config(config["concepts"])
        if reason is None and config["concepts"]["raw_slice"][1] > features["raw_dim"]:
            reason = "concepts.raw_slice lies outside the raw features"
        if reason is None and text_encoders.text_config_of(config).get("kind") != "minilm":
            reason = "concepts need a sentence encoder (text kind minilm)"
        if reason:
            raise ModelError(f"{where}: model.json {reason}")


MAX_CONFIG_BYTES = 1 << 20   # model.json is a few KB


def read_config(folder: Path) -> dict:
    """model.json parsed, or one ModelError line: missing, too large, not UTF-8, not JSON, a number of thousands
    of digits (Python's int limit), nesting past the recursion limit."""
    return read_json(folder / "model.json", MAX_CONFIG_BYTES, "a model description",
                     missing=f"{folder}: no model.json (not an imgtxt model folder)")


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
    if text_config["kind"] == "minilm":   # text.layers fewer than the weights hold would drop layers silently
        unused = f"minilm.encoder.layer.{text_config['layers']}."
        if any(name.startswith(unused) for name in tensors.keys()):
            raise ModelError(f"{path}: model.json says text.layers {text_config['layers']}, but the weights hold "
                             f"more layers")
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




def _weights_cache() -> Path | None:
    """The digest cache's file, or None where there is no cache folder (no home): the weights are hashed then."""
    from imgtxt.errors import ImgtxtError
    from imgtxt.paths import cache_dir

    try:
        return cache_dir() / "weights-sha256.json"
    except (ImgtxtError, KeyError, RuntimeError):
        return None


def file_stamp(st: os.stat_result) -> list[int]:
    """What changes with every write of a file: ctime too, which `touch -r` cannot set back."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns]


def verify_weights(path: Path, recorded: str | None) -> str:
    """The sha256 of the weights file, checked against model.json's (models saved before it was recorded are
    only hashed). The digest is remembered in the cache by the file's (size, mtime_ns, inode, device, ctime_ns),
    so a file is read once per change, not at every load (45 MB: ~50 ms)."""
    stamp = file_stamp(os.stat(path))
    key = os.fsdecode(os.path.abspath(path))
    cache_file = _weights_cache()
    try:
        if cache_file is None:
            raise OSError("no cache folder")
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError, RecursionError):
        cache = {}
    entry = cache.get(key)
    if isinstance(entry, list) and len(entry) == 6 and entry[:5] == stamp and isinstance(entry[5], str):
        digest = entry[5]
    else:
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        digest = sha.hexdigest()
        cache[key] = [*stamp, digest]
        if cache_file is not None:
            _write_cache(cache_file, cache)
    if recorded is not None and digest != recorded:
        raise ModelError(f"{path}: the weights differ from the weights_sha256 in model.json (changed or damaged "
                         f"after the model was saved); restore the file, or save the model again")
    return digest


def remember_weights(path: Path, digest: str) -> None:
    """Record a digest just computed (at save), so the first load does not read the file again."""
    cache_file = _weights_cache()
    if cache_file is None:
        return
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError, RecursionError):
        cache = {}
    cache[os.fsdecode(os.path.abspath(path))] = [*file_stamp(os.stat(path)), digest]
    _write_cache(cache_file, cache)


def _write_cache(cache_file: Path, cache: dict) -> None:
    """Best effort (a read-only or full cache only costs a re-hash next time); never leaves a partial file."""
    from imgtxt.paths import private_dirs, writing

    try:
        private_dirs(cache_file.parent)
        with writing(cache_file, 0o600) as f:
            f.write(json.dumps(cache).encode("utf-8"))
    except OSError:
        pass


# What a caption's vector depends on besides the weights: model.json's settings and the text encoder's files.
VECTOR_SECTIONS = ("text", "joint", "features", "search", "concepts")
TEXT_FILES = ("tokenizer.json", "vocab.json", "sse_vocab.json", "bow_terms.json")


def text_id(model) -> str:
    """The model id extended by everything else that changes a caption's vector (`layers`, `head`, use_abs, a
    tokenizer.json edited): what caches of caption vectors are keyed by, so an edited copy of a model folder
    never reads (or poisons) the original's."""
    digest = hashlib.sha256(json.dumps({k: model.config.get(k) for k in VECTOR_SECTIONS}, sort_keys=True,
                                       default=str).encode("utf-8"))
    for name in TEXT_FILES:
        path = Path(model.folder) / name
        if path.is_file():
            digest.update(name.encode("utf-8") + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return f"{model.model_id}-{digest.hexdigest()[:12]}"
