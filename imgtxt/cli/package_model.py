"""`imgtxt package-model MODEL_DIR`: finish a model folder for shipping (research/packaging.py)."""
from __future__ import annotations

from pathlib import Path

import click

from .progress import CaptionProgress, say


@click.argument("model", type=click.Path(path_type=Path, file_okay=False))
@click.option("--storage", type=click.Choice(["int8", "fp16"]), default="int8", show_default=True,
              help="How the caption vectors are stored: int8 with a scale per row, or fp16.")
def package_model(model, storage):
    """Make a model ready to ship: cnn.onnx and the caption bank's vectors.

    Exports the CNN into MODEL/cnn.onnx (indexing then runs without torch) and embeds MODEL/captions.txt into
    MODEL/captions.safetensors, recorded in model.json with its sha256 (the first `imgtxt caption` is then as
    quick as the second). Needs the train extra.
    """
    from imgtxt.research.packaging import package_model as package

    with CaptionProgress() as report:
        done = package(model, storage, on_step=lambda m: say(f"imgtxt: {m}"), progress=report.progress)
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in (done["cnn"], done["captions"]))
    click.echo(f"packaged {model}: {sizes} ({done['record']['count']} captions x {done['record']['dim']}, "
               f"{done['record']['storage']})")
