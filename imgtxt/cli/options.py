"""Options and argument checks shared by the research commands (research.py, finishing.py)."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Optional

import click

from imgtxt.errors import ImgtxtError, UsageError

PathType = click.Path(path_type=Path)


class Number(click.ParamType):
    """A finite number in a range, checked before any work starts (click.FloatRange lets NaN through, and a
    nonsense value would otherwise end a training run in a traceback minutes later)."""

    name = "number"

    def __init__(self, low: float | None = None, high: float | None = None, low_open: bool = False):
        self.low, self.high, self.low_open = low, high, low_open

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'above' if self.low_open else 'at least'} {self.low:g}")
        if self.high is not None:
            parts.append(f"at most {self.high:g}")
        return "a finite number" + (" " + " and ".join(parts) if parts else "")

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{str(value)[:40]!r} is not a number; give {self.describe()}", param, ctx)
        too_low = self.low is not None and (number < self.low or (self.low_open and number == self.low))
        if not math.isfinite(number) or too_low or (self.high is not None and number > self.high):
            self.fail(f"{str(value)[:40]} is not {self.describe()}", param, ctx)
        return number


def one_of(*values):
    """A callback accepting only these values of an int option (click.Choice would make it a str)."""
    def check(ctx, param, value):
        if value is not None and value not in values:
            raise click.BadParameter(f"{value} is not one of {', '.join(map(str, values))}", ctx, param)
        return value
    return check


def comma_list(item, what: str):
    """A callback parsing a comma-separated option into a tuple, each item through item(text) (a ValueError or
    KeyError: refused with what the option accepts)."""
    def parse(ctx, param, value):
        if value is None:
            return None
        items = [part.strip() for part in value.split(",")]
        try:
            return tuple(item(part) for part in items if part)
        except (ValueError, KeyError):
            raise click.BadParameter(f"{value[:80]!r} is not {what}", ctx, param) from None
    return parse


def known_preset(ctx, param, value):
    from imgtxt.research.presets import OTHER_PRESETS, PRESETS

    known = [*PRESETS, *OTHER_PRESETS]
    if value.upper() not in known:
        raise click.BadParameter(f"{value[:40]!r} is not one of {', '.join(known)}", ctx, param)
    return value


def split_name(text: str) -> str:
    if text not in ("train", "val", "test"):
        raise ValueError(text)
    return text


def size(text: str) -> int:
    number = int(text)
    if number < 1:
        raise ValueError(text)
    return number


NOT_MATRICES = ("bias", "bias_ih", "bias_hh", "LayerNorm.weight", ".idf", "sse.conv.weight")   # 1-D, or 3-D
INT8_CONFIGS = {"gru": {}, "minilm": {"layers": 6, "head": "mlp"}, "rcn": {}, "bow": {"hidden": 1}, "sse": {"top": True}}


def int8_tensors(names: tuple[str, ...], text_encoder: str) -> tuple[str, ...]:
    """`train --int8`: only matrices a model of this text encoder can hold are stored int8 (a scale per row); any
    other name would be ignored silently, or end the run in a traceback when the model is saved."""
    from imgtxt.model import text_encoders
    from imgtxt.model.modelfile import IMAGE_PROJECTION

    if not names:
        return ()
    known = [IMAGE_PROJECTION, "image_hidden.weight"]
    if text_encoder in INT8_CONFIGS:
        known += text_encoders.tensor_names({"kind": text_encoder, **INT8_CONFIGS[text_encoder]})
    matrices = [n for n in known if not n.endswith(NOT_MATRICES)] if text_encoder != "amecon" else []
    unknown = [n for n in names if n not in matrices]
    if unknown:
        accepted = ", ".join(dict.fromkeys(re.sub(r"\.layer\.\d+\.", ".layer.N.", m) for m in matrices))
        raise click.BadParameter(f"{unknown[0][:60]!r} is not a matrix of a {text_encoder} model; give some of "
                                 f"{accepted or 'none (it stores no int8 tensors)'}"
                                 f"{' (N: 0-5)' if text_encoder == 'minilm' else ''}",
                                 param_hint="'--int8'")
    return names


AT_LEAST_1 = click.IntRange(min=1)
AT_LEAST_0 = click.IntRange(min=0)
dataset_arg = click.argument("dataset")
data_dir_opt = click.option("--data-dir", type=PathType, envvar="IMGTXT_DATA_DIR", default=None,
                            help="Dataset folder: dataset_<name>.json (Karpathy format) and the images. "
                                 "Env: IMGTXT_DATA_DIR.")
# Named values are click.Choice and lists are parsed by a callback, so a typo is refused when the command line is
# read, not after minutes of features. The lists are spelled out: declaring an option must not load the model layer
# (tests/test_hostile_arguments.py keeps them equal to the model layer's and the pipeline's).
BACKBONES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "vgg16", "resnet50", "resnet152")
FEATURE_RUNTIMES = ("torch", "openvino")
backbone_opt = click.option("--backbone", type=click.Choice(BACKBONES), default="efficientnet_lite0",
                            show_default=True, help="efficientnet_lite0/1/2, vgg16, resnet50, resnet152")
layer_set_opt = click.option("--layer-set", type=click.Choice(["all", "blocks"]), default="all", show_default=True,
                             help="'all' = every conv layer; 'blocks' = block outputs (EfficientNet)")
crops_opt = click.option("--crops", type=int, default=1, show_default=True, callback=one_of(1, 10),
                         help="1 (centre crop) or 10 (corners + centre, mirrored)")
# model_config.PRECISIONS, spelled out: declaring an option must not load the model layer
precision_opt = click.option("--precision", type=click.Choice(["auto", "fp32", "fp16", "bf16"]), default="auto",
                             show_default=True,
                             help="auto (bf16 on CPU / fp16 on CUDA) or fp32")
def weights_file(ctx, param, value):
    if value is not None and value != "random" and not Path(value).is_file():
        raise click.BadParameter(f"{value[:200]!r} is not a file (give a weights file, or 'random')", ctx, param)
    return value


backbone_weights_opt = click.option("--backbone-weights", default=None, callback=weights_file,
                                    help="Local weights file for the backbone, or 'random'.")
EXISTING = click.Path(exists=True, path_type=Path)        # checked when the command line is read
EXISTING_FOLDER = click.Path(exists=True, file_okay=False, path_type=Path)
runtime_opt = click.option("--runtime", type=click.Choice(FEATURE_RUNTIMES), default="torch", show_default=True,
                           help="Dataset features with torch, or 'openvino': the exported graph imgtxt index runs "
                                "(fp32 only; ~4x less CPU here; agrees with torch to ~1e-4)")
quiet_opt = click.option("--quiet", "-q", is_flag=True, help="No progress output.")


def check_feature_settings(backbone: str, layer_set: str, precision: str, runtime: str) -> None:
    """The feature options that only fail together, refused before torch loads (it took 11 s to say so)."""
    if layer_set == "blocks" and not backbone.startswith("efficientnet_lite"):
        raise click.BadParameter(f"'blocks' is for the EfficientNet-Lite backbones; {backbone} has 'all' only",
                                 param_hint="'--layer-set'")
    if runtime != "torch" and precision != "fp32":
        raise click.BadParameter(f"--runtime {runtime} computes fp32 features only; pass --precision fp32",
                                 param_hint="'--precision'")


def feature_options(function):
    for option in (runtime_opt, backbone_weights_opt, precision_opt, crops_opt, layer_set_opt, backbone_opt):
        function = option(function)
    return function


def dataset_folder(dataset: str, data_dir: Optional[Path]) -> Path:
    from imgtxt.paths import data_dir as resolve
    from imgtxt.research.datasets import DATASETS, what_it_holds

    if dataset not in DATASETS:
        raise UsageError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    folder = resolve(data_dir)
    if folder is None:
        raise UsageError(f"where is {dataset}? {what_it_holds(dataset)}; pass --data-dir DIR or set IMGTXT_DATA_DIR")
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder; {what_it_holds(dataset)}; pass --data-dir DIR or set "
                         f"IMGTXT_DATA_DIR")
    return folder


def value_errors_are_ours(error: ValueError) -> ImgtxtError:
    return UsageError(str(error))
