"""The torch halves of the text-encoder kinds (see imgtxt.model.text_encoders for the contract): one module per
kind defining `Encoder`, trained by `imgtxt train`; `parts` holds what they share."""
from __future__ import annotations

import importlib

from imgtxt.model.text_encoders import KINDS


def torch_encoder(text_config: dict, embed_dim: int):
    """The trainable torch module of a kind (imports torch)."""
    kind = text_config["kind"]
    if kind not in KINDS:
        raise ValueError(f"unknown text encoder {kind!r}; known: {', '.join(KINDS)}")
    return importlib.import_module(f"{__name__}.{kind}").Encoder(text_config, embed_dim)
