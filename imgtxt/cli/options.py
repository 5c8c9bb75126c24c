"""Options and argument checks shared by the research commands (research.py, finishing.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from imgtxt.errors import ImgtxtError, UsageError

PathType = click.Path(path_type=Path)
dataset_arg = click.argument("dataset")
data_dir_opt = click.option("--data-dir", type=PathType, envvar="IMGTXT_DATA_DIR", default=None,
                            help="Dataset folder: dataset_<name>.json (Karpathy format) and the images. "
                                 "Env: IMGTXT_DATA_DIR.")
backbone_opt = click.option("--backbone", default="efficientnet_lite0", show_default=True,
                            help="efficientnet_lite0/1/2, vgg16, resnet50, resnet152")
layer_set_opt = click.option("--layer-set", default="all", show_default=True,
                             help="'all' = every conv layer; 'blocks' = block outputs (EfficientNet)")
crops_opt = click.option("--crops", type=int, default=1, show_default=True,
                         help="1 (centre crop) or 10 (corners + centre, mirrored)")
precision_opt = click.option("--precision", default="auto", show_default=True,
                             help="auto (bf16 on CPU / fp16 on CUDA) or fp32")
backbone_weights_opt = click.option("--backbone-weights", default=None,
                                    help="Local weights file for the backbone, or 'random'.")
runtime_opt = click.option("--runtime", default="torch", show_default=True,
                           help="Dataset features with torch, or 'openvino': the exported graph imgtxt index runs "
                                "(fp32 only; ~4x less CPU here; agrees with torch to ~1e-4)")
quiet_opt = click.option("--quiet", "-q", is_flag=True, help="No progress output.")


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
