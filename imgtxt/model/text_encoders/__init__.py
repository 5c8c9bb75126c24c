"""Text encoders: caption -> joint-space vector, one `kind` per encoder (model.json "text": {"kind": ...}).

Every kind has two halves that share tensor names (the model file's contract):
  imgtxt/model/text_encoders/<kind>.py      numpy only (no torch): tokenizer + forward for queries
  imgtxt/research/text_modules/<kind>.py    the torch module trained by `imgtxt train`

How to add a kind (e.g. "bow"):
 1. `<kind>.py` defines
      `Runtime(text_config: dict, tensors: Mapping[str, np.ndarray], folder: Path)` with
        `tokenize(text) -> list[int]` (ids the torch module takes; may be []),
        `check_query(text) -> str | None` (a one-line reason when a query cannot be encoded, else None),
        `encode(token_lists) -> np.ndarray (N, embed_dim) float32`, L2-normalised (the joint adds abs()),
        `sort_key(text) -> int` (cost proxy: captions are batched by it);
      `prepare(train_captions, options: dict) -> TextSetup` (training time: tokenizer, config, files, init weights);
      `TENSOR_NAMES(text_config) -> list[str]`, the tensors it reads from model.safetensors;
      optionally `TENSOR_SHAPES(text_config, embed_dim) -> {name: shape}` (None: any size), checked at load;
      optionally `SETTINGS = {key: (check(value) -> bool, "what it must be")}`, the "text" settings it reads,
        checked at load (check_settings) so a hostile model.json is one line, not an error inside numpy.
 2. `research/text_modules/<kind>.py` defines `Encoder(text_config, embed_dim)`, an nn.Module with
      `forward(tokens (B,T) int64 right-padded with 0, lengths (B,)) -> (B, embed_dim)` L2-normalised,
      `export_tensors() -> dict[str, Tensor]` under the names the runtime reads,
      `import_tensors(dict)`; optionally `frozen_prefix(tokens, lengths)` + `forward_from_prefix(prefix, lengths)`
      when its lower part is frozen, so training computes that part once per run (see research/train.py).
 3. Register the kind in KINDS below and add a test equal-to-torch like tests/test_text_encoders.py.
Tensor names must be stable: they are the file format. Kind-specific files (vocab.json, tokenizer.json) are
written from `TextSetup.files` into the model folder.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

KINDS = ("gru", "minilm", "rcn", "bow", "sse")


@dataclass
class TextSetup:
    """What training needs from a text-encoder kind: a tokenizer, the model.json "text" section, the files
    to ship beside the weights, and pretrained tensors to start from (names as in export_tensors)."""

    config: dict                               # model.json "text": {"kind": ..., ...}
    tokenize: Callable[[str], list[int]]
    files: dict[str, bytes] = field(default_factory=dict)
    init_tensors: dict = field(default_factory=dict)   # name -> np.ndarray
    description: str = ""


def _module(kind: str):
    if kind not in KINDS:
        raise ValueError(f"unknown text encoder {kind!r}; known: {', '.join(KINDS)}")
    return importlib.import_module(f"{__name__}.{kind}")


def positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_settings(text_config) -> str | None:
    """A one-line reason when model.json's "text" section cannot work (unknown kind, a setting of the wrong type
    or range), else None."""
    if not isinstance(text_config, dict):
        return "the text section must be an object"
    kind = text_config.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        return f"unknown text encoder {kind!r}; known: {', '.join(KINDS)}"
    for key, (check, what) in getattr(_module(kind), "SETTINGS", {}).items():
        if key not in text_config:
            return f"text.{key} is missing"
        if not check(text_config[key]):
            return f"text.{key} must be {what}, not {str(text_config[key])[:40]!r}"
    extra = getattr(_module(kind), "check_settings", None)
    return extra(text_config) if extra else None


def text_config_of(model_config: dict) -> dict:
    """model.json's "text" section; models from before text encoders had kinds are GRUs described by "joint"."""
    if "text" in model_config:
        return model_config["text"]
    joint = model_config["joint"]
    return {"kind": "gru", "vocab_size": joint["vocab_size"], "word_dim": joint["word_dim"]}


def prepare(kind: str, train_captions: list[str], options: dict) -> TextSetup:
    return _module(kind).prepare(train_captions, options)


def tensor_names(text_config: dict) -> list[str]:
    return list(_module(text_config["kind"]).TENSOR_NAMES(text_config))


def tensor_shapes(text_config: dict, embed_dim: int) -> dict[str, tuple]:
    """Expected tensor shapes (None: any size) for kinds that declare them (`TENSOR_SHAPES`), else {}."""
    shapes = getattr(_module(text_config["kind"]), "TENSOR_SHAPES", None)
    return shapes(text_config, embed_dim) if shapes else {}


def runtime(text_config: dict, tensors, folder: Path):
    """The numpy encoder of a saved model (tensors: a lazy name -> array mapping)."""
    return _module(text_config["kind"]).Runtime(text_config, tensors, Path(folder))

