"""Dataset features from the exported CNN graph (`cnn_export`) on OpenVINO: the same fp32 raw features as
`fne.RawFeatureExtractor`, for about a quarter of torch's CPU time here (`imgtxt features … --runtime openvino`).

The graph is the one `imgtxt index` runs, exported once per backbone / layer set / crops into
<cache>/cnn/ and reused. Its rows agree with torch fp32 to ~1e-4, not bit for bit, so the feature cache
keys them apart (`FeatureSpec.runtime`) and a model trained on them records `feature_runtime`.
"""
from __future__ import annotations

import numpy as np


class GraphFeatureExtractor:
    """The interface `feature_cache.compute_features` and `pipeline` use (backbone, dim, resize_size,
    layer_names, layer_dims, baseline_slice, crops, layer_set, call), computed by the exported graph."""

    def __init__(self, torch_extractor, graph):
        ex = torch_extractor
        self.backbone, self.layer_set, self.crops = ex.backbone, ex.layer_set, ex.crops
        self.layer_names, self.layer_dims = ex.layer_names, ex.layer_dims
        self.dim, self.baseline_slice = ex.dim, ex.baseline_slice
        self.graph = graph
        if graph.dim != self.dim or graph.resize_size != ex.resize_size:
            from imgtxt.model.cnn_runtime import GraphError

            raise GraphError(f"{graph.path}: gives {graph.dim} features at {graph.resize_size} px, "
                             f"the backbone {self.dim} at {ex.resize_size} px")

    @classmethod
    def from_torch(cls, extractor, backend: str = "openvino", threads: int | None = None) -> "GraphFeatureExtractor":
        """Export `extractor`'s graph into the cache unless an identical one is there, then open it."""
        from imgtxt.model.cnn_export import export_extractor
        from imgtxt.model.cnn_runtime import OnnxFeatureExtractor, cached_graph_path

        features = {"backbone": extractor.backbone.name, "backbone_id": extractor.backbone.id,
                    "layer_set": extractor.layer_set, "crops": extractor.crops, "raw_dim": extractor.dim}
        path = cached_graph_path(features)
        if path.is_file():
            graph = OnnxFeatureExtractor(path, threads, backend, "fp32")
            if graph.matches(features):
                extractor.close()
                return cls(extractor, graph)
        export_extractor(extractor, path)   # closes the torch extractor's hooks
        return cls(extractor, OnnxFeatureExtractor(path, threads, backend, "fp32"))

    @property
    def resize_size(self) -> int:
        return self.graph.resize_size

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.graph.raw_features(images)

    def close(self) -> None:
        pass
