"""Finishing a model folder for users: what would otherwise be computed on a user's machine, done once here.

- cnn.onnx: the CNN exported as one graph (cnn_export), so indexing and captioning run on OpenVINO / ONNX Runtime
  and an install without torch works;
- captions.safetensors: the caption bank embedded by the model's own text encoder (caption_bank), so the first
  `imgtxt caption` does not spend minutes embedding 30,000 captions.
Needs torch (the export); the bank is embedded by the same numpy encoder the queries use.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from imgtxt.errors import ModelError
from imgtxt.model import concepts, text_encoders
from imgtxt.model.caption_bank import write_caption_vectors
from imgtxt.model.modelfile import TrainedModel, image_tensor_names, save_model


def package_model(folder: Path | str, storage: str = "int8", on_step=None, progress=None) -> dict:
    """Write MODEL/cnn.onnx and MODEL/captions.safetensors (recorded in model.json). `on_step(message)` before
    each part, `progress(done, total)` while the bank is embedded. Returns what was written."""
    from imgtxt.model.cnn_export import export_for_model

    model = TrainedModel.load(folder)
    say = on_step or (lambda message: None)
    say("exporting the CNN to cnn.onnx...")
    graph = export_for_model(model, Path(model.folder) / "cnn.onnx")
    bank = model.caption_bank()
    if not bank:
        raise ModelError(f"{model.folder}: no caption bank (captions.txt) to embed")
    say(f"embedding {len(bank)} captions...")
    vectors = model.encode_text(bank, batch_size=128,
                                progress=(lambda done: progress(done, len(bank))) if progress else None)
    # stored without the hubness coordinate (a constant 1 for text; see search_tuning)
    record = write_caption_vectors(model.folder, vectors[:, :model.content_dim], storage)
    return {"cnn": graph, "captions": Path(model.folder) / record["file"], "record": record}


def resave_model(src: Path | str, dst: Path | str, int8: tuple[str, ...] = (), update: dict | None = None) -> None:
    """Copy a model folder with another storage choice (int8 tensors) and extra model.json keys (name, recipe)."""
    src, dst = Path(src), Path(dst)
    model = TrainedModel.load(src)
    config = {k: v for k, v in model.config.items() if k not in ("format", "version", "weights_sha256")}
    config.update(update or {})
    names = text_encoders.tensor_names(text_encoders.text_config_of(config)) + image_tensor_names(config["joint"])
    weights = {n: np.asarray(model.tensors[n], dtype=np.float32) for n in names}
    files = {n: (src / n).read_bytes() for n in ("vocab.json", "tokenizer.json") if (src / n).is_file()}
    extra = {n: np.asarray(model.tensors[n], dtype=np.float32) for n in concepts.TENSOR_NAMES} \
        if "concepts" in config else None
    save_model(dst, weights, None, config, model.stats, model.caption_bank(), files=files, int8=int8, extra=extra)
