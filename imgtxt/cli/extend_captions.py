"""`imgtxt extend-captions MODEL --conceptual-captions TSV --output DIR`: more of the world in the caption bank
(research/caption_sources.py)."""
from __future__ import annotations

from pathlib import Path

import click

from imgtxt.errors import UsageError

from .progress import CaptionProgress, say


@click.argument("model", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--conceptual-captions", "tsv", required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Conceptual Captions' Validation_GCC-1.1.0-Validation.tsv (caption TAB image URL per line).")
@click.option("--output", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="New model folder: a copy of MODEL with the longer bank.")
@click.option("--count", type=click.IntRange(min=1), default=100000, show_default=True,
              help="At most this many lines are added (the most diverse first).")
def extend_captions(model, tsv, output, count):
    """Add photo descriptions from Conceptual Captions to a model's caption bank.

    Keeps the lines that read like descriptions of a photo, tidies them, drops near-duplicates and picks the
    most diverse; the bank's stored vectors are copied and only the new lines embedded. The copy's caption
    offsets and search corrections are MODEL's: run tune-search, calibrate and tune-captions on it before use.
    """
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.caption_sources import extend_bank, world_captions

    if output.exists():
        raise UsageError(f"{output} exists; give a new folder")
    lines, counts = world_captions(tsv, TrainedModel.load(model).caption_bank(), count)
    say(f"imgtxt: {counts['read']} lines read, {counts['descriptions']} read as descriptions, "
        f"{counts['chosen']} chosen")
    with CaptionProgress() as report:
        done = extend_bank(model, output, lines, progress=lambda n: report.progress(n, len(lines)))
    click.echo(f"wrote {output}: {done['added']} captions added, {done['bank']} in the bank")
