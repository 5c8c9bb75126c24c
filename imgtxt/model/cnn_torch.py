"""The CNN through torch: feature settings, the raw FNE extractor they open, and `ImageEmbedder` (photos ->
joint vectors with a trained model). The fallback when no exported graph can run, and what dataset features and
graph export start from; torch is imported only when an extractor is opened."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class FeatureSettings:
    backbone: str = "efficientnet_lite0"
    layer_set: str = "all"
    crops: int = 1
    precision: str = "auto"
    backbone_weights: str | None = None   # a file, "random", or None for the backbone's standard weights
    runtime: str = "torch"                # dataset features: "torch" or "openvino" (the exported graph, fp32)


def check_torch(model_folder) -> None:
    """A one-line ModelError when the CNN has to run in torch (no exported graph) but torch is not installed."""
    from imgtxt.errors import ModelError, install_hint, missing_modules

    if missing_modules("torch"):
        raise ModelError(f"{model_folder} carries no CNN graph (cnn.onnx) and torch is not installed to run its "
                         f"CNN: finish the model with `imgtxt package-model` where torch is, or "
                         f"{install_hint('train')}")


def torch_extractor(settings: FeatureSettings, device: str | None = None):
    """The backbone's raw FNE extractor in torch (`settings.runtime` is the dataset pipeline's business)."""
    from .backbones import load_backbone
    from .fne import RawFeatureExtractor

    backbone = load_backbone(settings.backbone, settings.backbone_weights)
    return RawFeatureExtractor(backbone, settings.layer_set, settings.crops, device=device,
                               precision=settings.precision)


class ImageEmbedder:
    """Photos -> joint-space vectors with a trained model: its CNN settings, its FNE statistics."""

    def __init__(self, model, device: str | None = None, backbone_weights: str | None = None):
        from imgtxt.errors import ModelError

        from .backbones import BackboneError

        f = model.features
        self.model = model
        self.settings = FeatureSettings(f["backbone"], f["layer_set"], f["crops"], f["precision"], backbone_weights)
        try:
            self.extractor = torch_extractor(self.settings, device=device)
        except (BackboneError, ValueError) as e:  # unknown backbone or layer set, missing weights: one line
            raise ModelError(f"{model.folder}: cannot build its image network ({e})") from None
        if self.extractor.backbone.id != f["backbone_id"] and f["backbone_id"].split("@")[1] != "random":
            raise ModelError(
                f"the model was trained on {f['backbone_id']} features but this backbone is "
                f"{self.extractor.backbone.id}; its vectors would be meaningless"
            )
        if self.extractor.dim != f["raw_dim"]:
            raise ModelError(f"backbone gives {self.extractor.dim} features, the model expects {f['raw_dim']}")

    @property
    def resize_size(self) -> int:
        return self.extractor.resize_size

    @property
    def device_line(self) -> str:
        device = str(getattr(self.extractor, "device", "cpu"))
        return f"the {'GPU' if device.startswith('cuda') else 'CPU'} (torch, {device})"

    def embed(self, images: np.ndarray) -> np.ndarray:
        """(B, R, R, 3) uint8 squares from `images.load_square(path, self.resize_size)` -> (B, D)."""
        return self.model.encode_raw_images(self.extractor(images))
