"""Export a model's whole raw-feature extractor (crops, normalisation, CNN, per-layer spatial means,
crop averaging) to one ONNX graph, so indexing can run it with ONNX Runtime and never import torch.

The graph takes uint8 squares (N, R, R, 3), exactly what `images.load_square` gives, and returns the
raw FNE features (N, D) float32 of `fne.RawFeatureExtractor` at fp32 precision. Run once per backbone
with torch installed (`imgtxt export-cnn MODEL_DIR`, or automatically by the first `imgtxt index`);
`cnn_runtime` checks the stored settings before it uses a file.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from imgtxt.errors import ImgtxtError
from imgtxt.paths import replacing

GRAPH_FORMAT = "imgtxt-cnn-1"


class _FeatureGraph:
    """Builds the torch module that is traced: the same hooks as RawFeatureExtractor, fp32, no autocast."""

    def __init__(self, extractor):
        import torch

        ex = extractor
        outputs: list = []

        def hook(module, inputs, output):
            outputs.append(output.mean(dim=(2, 3)) if output.dim() == 4 else output.flatten(1))

        class Graph(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = ex.backbone.net
                self.register_buffer("mean", torch.tensor(ex.backbone.mean).view(1, 3, 1, 1))
                self.register_buffer("std", torch.tensor(ex.backbone.std).view(1, 3, 1, 1))

            def forward(self, squares):
                outputs.clear()
                x = squares.permute(0, 3, 1, 2)
                x = ex._crops(x).float()
                x = (x - self.mean) / self.std
                self.net(x)
                feats = torch.cat(list(outputs), dim=1)
                outputs.clear()
                if ex.crops == 1:
                    return feats
                return feats.view(ex.crops, squares.shape[0], -1).mean(0)

        self.handles = [m.register_forward_hook(hook) for _, m in ex.backbone.layer_sets[ex.layer_set]]
        self.module = Graph().eval()

    def close(self):
        for h in self.handles:
            h.remove()


def graph_metadata(extractor) -> dict:
    return {"format": GRAPH_FORMAT, "backbone_id": extractor.backbone.id, "layer_set": extractor.layer_set,
            "crops": extractor.crops, "resize_size": extractor.resize_size, "dim": extractor.dim}


def export_extractor(extractor, path: Path | str, opset: int = 17) -> Path:
    """Write the extractor's graph to `path` (atomically: a half-written file is never picked up).

    Closes the extractor: its own hooks must not fire inside the traced graph."""
    import onnx
    import torch

    extractor.close()
    from imgtxt.paths import cache_dir, private_dirs

    path = Path(path)
    try:
        in_cache = path.resolve().is_relative_to(cache_dir().resolve())
    except (ImgtxtError, KeyError, RuntimeError):   # no cache folder (no home)
        in_cache = False
    if in_cache:
        private_dirs(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    graph = _FeatureGraph(extractor)
    size = extractor.resize_size
    example = torch.zeros((2, size, size, 3), dtype=torch.uint8)
    with replacing(path) as tmp:   # a full disk, Ctrl-C: no partial graph is left in the cache
        try:
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
                torch.onnx.export(graph.module, (example,), str(tmp), input_names=["squares"],
                                  output_names=["features"], dynamic_axes={"squares": {0: "n"}, "features": {0: "n"}},
                                  opset_version=opset, dynamo=False, do_constant_folding=True)
        finally:
            graph.close()
        model = onnx.load(str(tmp))
        for key, value in graph_metadata(extractor).items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, json.dumps(value)
        onnx.save(model, str(tmp))
        if in_cache:   # the cache is private (paths.private_dirs); a model folder's graph is shared like its weights
            os.chmod(tmp, 0o600)
    return path


def export_for_model(model, path: Path | str | None = None, backbone_weights: str | None = None) -> Path:
    """Export the CNN of a trained model (its backbone, layer set and crops) next to it or to `path`."""
    from imgtxt.errors import ModelError

    from .cnn_torch import FeatureSettings, torch_extractor

    f = model.features
    settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], "fp32", backbone_weights)
    extractor = torch_extractor(settings, device="cpu")
    try:
        if extractor.backbone.id != f["backbone_id"] and f["backbone_id"].split("@")[1] != "random":
            raise ModelError(f"the model was trained on {f['backbone_id']} features but this backbone is "
                             f"{extractor.backbone.id}")
    except ModelError:
        extractor.close()
        raise
    return export_extractor(extractor, path or Path(model.folder) / "cnn.onnx")
