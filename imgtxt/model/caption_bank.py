"""A model's caption bank embedded ahead of time, so the first `imgtxt caption` costs what the second does.

`imgtxt package-model MODEL_DIR` embeds captions.txt with the model's own text encoder and stores the vectors in
MODEL_DIR/captions.safetensors: int8 with a float32 scale per row ("vectors", "vectors.scale"), or fp16
("vectors"). model.json's "caption_vectors" records the file's sha256 and captions.txt's, so a stored file that
is garbled, or that belongs to another captions.txt, is refused with a one-line notice and the bank is embedded
instead. The vectors' width is whatever the model's encoder gives (it is recorded, never assumed).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from .optional_parts import refusal

VECTORS_FILE = "captions.safetensors"
RECORD_KEY = "caption_vectors"      # its entry in model.json
STORAGES = ("int8", "fp16")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_caption_vectors(folder: Path | str, vectors: np.ndarray, storage: str = "int8") -> dict:
    """Store the bank's vectors (rows in captions.txt's order, blank lines left out) and record them in
    model.json; returns the record. The file is written first and model.json replaced after it, so a crash
    leaves either the old record or the new one, never a record of a half-written file."""
    import os

    from safetensors.numpy import save_file

    from imgtxt.paths import replacing, writing

    from .tensor_file import quantize_rows

    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {', '.join(STORAGES)}, not {storage!r}")
    folder = Path(folder)
    vectors = np.asarray(vectors, dtype=np.float32)
    if storage == "int8":
        q, scale = quantize_rows(vectors)
        tensors = {"vectors": q, "vectors.scale": scale}
    else:
        tensors = {"vectors": vectors.astype(np.float16)}
    with replacing(folder / VECTORS_FILE) as tmp:
        save_file(tensors, str(tmp))
        os.chmod(tmp, 0o644)  # safetensors writes 0600: a wheel would install it unreadable for other users
    record = {"file": VECTORS_FILE, "storage": storage, "count": int(vectors.shape[0]), "dim": int(vectors.shape[1]),
              "sha256": file_sha256(folder / VECTORS_FILE), "captions_sha256": file_sha256(folder / "captions.txt")}
    config_path = folder / "model.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config[RECORD_KEY] = record
    with writing(config_path) as f:
        f.write(json.dumps(config, indent=2).encode("utf-8"))
    return record


def recorded_file_problem(folder: Path, record: dict) -> str | None:
    """Why a file that model.json records beside the caption bank ({"file", "sha256", "captions_sha256"}) cannot
    be trusted, or None. Raises KeyError / TypeError / OSError for a record or a file that cannot be read."""
    path = folder / str(record["file"])
    if path.name != record["file"] or path.name.startswith("."):
        return "model.json names an odd file"
    if not path.is_file():
        return "listed in model.json but missing"
    if file_sha256(path) != record["sha256"]:
        return "damaged (its sha256 differs from model.json's)"
    if file_sha256(folder / "captions.txt") != record["captions_sha256"]:
        return "stale (captions.txt changed since it was made)"
    return None


def read_caption_vectors(model, bank: list[str], notices: list[str] | None = None,
                         stride: int = 1) -> np.ndarray | None:
    """The stored vectors of `model`'s caption bank as float32 (len(bank), dim), or None when the model has none
    or they cannot be trusted (then a one-line reason goes to `notices` and the caller embeds the bank).
    `stride`: every stride-th row only (converted alone: the whole bank in float32 is 175 MB)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    record = model.config.get(RECORD_KEY)
    if not record:
        return None
    folder = Path(model.folder)

    refuse = refusal(notices, folder / VECTORS_FILE, "embedding the caption bank instead")

    try:
        problem = recorded_file_problem(folder, record)
        if problem:
            return refuse(problem)
        tensors = load_file(str(folder / record["file"]))
        stored = tensors["vectors"]
        if stored.shape != (len(bank), record["dim"]) or stored.shape[0] != record["count"]:
            return refuse(f"holds {stored.shape[0]} rows for {len(bank)} captions")
        vectors = stored[::stride].astype(np.float32)
        if "vectors.scale" in tensors:
            vectors *= tensors["vectors.scale"][::stride].astype(np.float32)[:, None]
    except (KeyError, TypeError, ValueError, OSError, SafetensorError) as e:
        return refuse(f"unreadable ({type(e).__name__}: {e})")
    return vectors
