"""Finishing a model folder for users: what would otherwise be computed on a user's machine, done once here.

- cnn.onnx: the CNN exported as one graph (cnn_export), so indexing and captioning run on OpenVINO / ONNX Runtime
  and an install without torch works;
- captions.safetensors: the caption bank embedded by the model's own text encoder (caption_bank), so the first
  `imgtxt caption` does not spend minutes embedding 30,000 captions.
Needs torch (the export); the bank is embedded by the same numpy encoder the queries use.
"""
from __future__ import annotations

from pathlib import Path

from imgtxt.errors import ModelError
from imgtxt.model.caption_bank import write_caption_vectors
from imgtxt.model.modelfile import TrainedModel


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
    record = write_caption_vectors(model.folder, vectors, storage)
    return {"cnn": graph, "captions": Path(model.folder) / record["file"], "record": record}
