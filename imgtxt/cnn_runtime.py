"""The CNN at index time without torch: the exported feature graph (`cnn_export`) on ONNX Runtime.

`onnx_embedder(model)` gives an object with the ImageEmbedder interface (`resize_size`, `embed`) when a
graph for the model's backbone, layer set and crops exists, else None (the caller falls back to torch).
Where a graph is looked for, in order:
  1. MODEL_DIR/cnn.onnx                          (`imgtxt export-cnn MODEL_DIR`)
  2. <cache>/cnn/<backbone>-<layers>-<crops>.onnx  (written by the first `imgtxt index` that had torch)
IMGTXT_CNN_RUNTIME=torch forces the torch path (comparisons); =onnx refuses to fall back.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from .modelfile import ModelError

RUNTIME_ENV = "IMGTXT_CNN_RUNTIME"


class GraphError(ModelError):
    """A graph file that does not belong to this model or cannot be loaded."""


def graph_key(features: dict) -> str:
    """File name of the cached graph: everything that changes its numbers."""
    text = json.dumps([features["backbone_id"], features["layer_set"], features["crops"]])
    return (f"{features['backbone']}-{features['layer_set']}-{features['crops']}crop-"
            f"{hashlib.sha1(text.encode()).hexdigest()[:10]}.onnx")


def cached_graph_path(features: dict) -> Path:
    from .feature_cache import cache_root

    return cache_root() / "cnn" / graph_key(features)


def graph_paths(model) -> list[Path]:
    return [Path(model.folder) / "cnn.onnx", cached_graph_path(model.features)]


class OnnxFeatureExtractor:
    """uint8 squares (N, R, R, 3) -> raw FNE features (N, D) float32, on ONNX Runtime's CPU provider."""

    def __init__(self, path: Path | str, threads: int | None = None):
        import onnxruntime as ort

        self.path = Path(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        # Decoding threads share the cores: idle CNN threads must sleep, not spin.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise GraphError(f"{self.path}: not a loadable ONNX graph ({type(e).__name__}: {e})") from None
        props = self.session.get_modelmeta().custom_metadata_map
        try:
            self.meta = {key: json.loads(value) for key, value in props.items()}
            self.resize_size = int(self.meta["resize_size"])
            self.dim = int(self.meta["dim"])
        except (KeyError, ValueError, TypeError):
            raise GraphError(f"{self.path}: not an imgtxt CNN graph (no settings stored in it)") from None
        self.input_name = self.session.get_inputs()[0].name

    def matches(self, features: dict) -> bool:
        m = self.meta
        same_weights = m.get("backbone_id") == features["backbone_id"] or (
            features["backbone_id"].endswith("@random") and m.get("backbone_id", "").split("@")[0]
            == features["backbone_id"].split("@")[0])
        return (same_weights and m.get("layer_set") == features["layer_set"]
                and m.get("crops") == features["crops"] and self.dim == features["raw_dim"])

    def raw_features(self, squares: np.ndarray) -> np.ndarray:
        squares = np.ascontiguousarray(squares, dtype=np.uint8)
        return self.session.run(None, {self.input_name: squares})[0].astype(np.float32, copy=False)

    __call__ = raw_features


class OnnxImageEmbedder:
    """Photos -> joint-space vectors: the ONNX CNN, then the model's numpy FNE and projection."""

    def __init__(self, model, extractor: OnnxFeatureExtractor):
        self.model, self.extractor = model, extractor

    @property
    def resize_size(self) -> int:
        return self.extractor.resize_size

    def embed(self, squares: np.ndarray) -> np.ndarray:
        return self.model.encode_raw_images(self.extractor.raw_features(squares))


def export_to_cache(model) -> Path | None:
    """Export the model's CNN into the cache once (needs torch); None where that cannot be done."""
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return None
    from .cnn_export import export_for_model

    try:
        return export_for_model(model, cached_graph_path(model.features))
    except OSError:  # an unwritable cache: the torch path still works
        return None


def onnx_embedder(model, threads: int | None = None, export: bool = True, notice=None):
    """The ONNX embedder for `model`, exporting its graph first if needed and possible; None -> use torch."""
    choice = os.environ.get(RUNTIME_ENV, "").lower()
    if choice == "torch":
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        if choice == "onnx":
            raise GraphError(f"{RUNTIME_ENV}=onnx but onnxruntime is not installed") from None
        return None
    for path in graph_paths(model):
        if path.is_file():
            extractor = OnnxFeatureExtractor(path, threads)
            if extractor.matches(model.features):
                return OnnxImageEmbedder(model, extractor)
            if path.name == "cnn.onnx":
                raise GraphError(f"{path} was exported for other CNN settings than {model.folder}/model.json; "
                                 f"re-run `imgtxt export-cnn {model.folder}`")
    if export:
        if notice:
            notice("imgtxt: exporting the CNN to ONNX once (later runs start without torch)")
        path = export_to_cache(model)
        if path is not None:
            return onnx_embedder(model, threads, export=False)
    if choice == "onnx":
        raise GraphError(f"{RUNTIME_ENV}=onnx but there is no CNN graph for {model.folder}")
    return None
