"""The frozen part of a pretrained text encoder's output, kept on disk across training runs.

With MiniLM's lower layers frozen, their output depends only on those weights and the caption ids, yet computing it
for Flickr8k's 35,000 captions took 2-8 minutes of every run here. The file name hashes exactly what the numbers
depend on: the encoder's class, how many layers are frozen, every frozen tensor (name and bytes) and the token
lists. A changed weight, a different split or a different number of trainable layers is a different file; an
unreadable file is recomputed and overwritten.

Layout: <cache root>/text-prefix/<sha1>.pt holding {"stacked": (N, D)} (every layer frozen: pooled sentence
vectors, 4*D bytes a caption) or {"ragged": (sum of lengths, D), "lengths": (N,)} (per-token states under a
trainable top: ~23 kB a caption for MiniLM).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from imgtxt.paths import private_dirs, replacing


def prefix_key(text_module: torch.nn.Module, token_lists: list[list[int]]) -> str:
    inner = getattr(text_module, "encoder", text_module)   # model.TextEncoder wraps the kind's module
    digest = hashlib.sha1()
    digest.update(json.dumps([type(inner).__module__, type(inner).__qualname__,
                              getattr(inner, "frozen_layers", None)]).encode())
    frozen = [(n, t) for n, t in text_module.named_parameters() if not t.requires_grad]
    frozen += list(text_module.named_buffers())
    for name, tensor in sorted(frozen, key=lambda item: item[0]):
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    digest.update(json.dumps(token_lists, separators=(",", ":")).encode())
    return digest.hexdigest()


def load_prefix(path: Path, n: int) -> torch.Tensor | list[torch.Tensor] | None:
    """What `save_prefix` wrote for n captions, or None when the file is missing, unreadable or of another size."""
    if not path.is_file():
        return None
    try:
        stored = torch.load(path, map_location="cpu", weights_only=True)
        if "stacked" in stored:
            return stored["stacked"] if len(stored["stacked"]) == n else None
        lengths = stored["lengths"].tolist()
        if len(lengths) != n or sum(lengths) != len(stored["ragged"]):
            return None
        return list(torch.split(stored["ragged"], lengths))
    except Exception:  # noqa: BLE001 - a truncated or foreign file is only a cache miss
        return None


def save_prefix(path: Path, prefix: torch.Tensor | list[torch.Tensor]) -> None:
    """Atomically: a run killed mid-write leaves no half file that a later run could pick up."""
    if isinstance(prefix, torch.Tensor):
        stored = {"stacked": prefix.contiguous()}
    else:
        stored = {"ragged": torch.cat(prefix), "lengths": torch.tensor([len(p) for p in prefix])}
    try:
        private_dirs(path.parent)
        with replacing(path) as tmp:
            torch.save(stored, tmp)
            os.chmod(tmp, 0o600)
    except OSError:
        pass  # an unwritable or full cache costs the next run the recomputation, nothing else
