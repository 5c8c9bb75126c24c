"""The commands that finish a trained model before it ships: its CNN graph (export-cnn), the ConSE bridge
(add-concepts), the search corrections (tune-search), the score calibration (calibrate), the caption hubness
(tune-captions), the classifier's prior on the caption bank's class lines (tune-caption-prior). Registered
with the research commands (research.py)."""
from __future__ import annotations

import json

import click

from imgtxt.errors import ImgtxtError, UsageError

from .options import (
    PathType,
    data_dir_opt,
    dataset_arg,
    dataset_folder,
    quiet_opt,
    value_errors_are_ours,
)


def fit_on_split_options(command):
    """MODEL, --dataset, --data-dir and --split: what every fit of a model on a dataset split takes."""
    for option in reversed((click.argument("model", type=PathType, required=False),
                            click.option("--dataset", default="flickr8k", show_default=True,
                                         help="flickr8k, flickr30k or coco"),
                            data_dir_opt,
                            click.option("--split", type=click.Choice(["val", "train", "test"]), default="val",
                                         show_default=True,
                                         help="The split to fit on (never test)."))):
        command = option(command)
    return command


def _fit_on_split(command: str, model, dataset, data_dir, split, fit):
    """(the loaded model, fit(model, dataset folder)) for a command that fits settings on a split: never the test
    split, and a ValueError from the fit is one line."""
    from imgtxt.library.photo_library import load_model

    folder = dataset_folder(dataset, data_dir)
    if split == "test":
        raise UsageError(f"{command} on val (or train): the test split stays held out")
    loaded = load_model(model)
    try:
        return loaded, fit(loaded, folder)
    except ValueError as e:
        raise value_errors_are_ours(e) from None


@click.argument("model", type=PathType, required=False)
def export_cnn(model):
    """Export a model's CNN for OpenVINO / ONNX Runtime.

    Writes MODEL/cnn.onnx, so that `imgtxt index` runs without torch.

    MODEL is a model folder (default: the shipped model).
    """
    from imgtxt.library.photo_library import load_model
    from imgtxt.model.cnn_export import export_for_model

    try:
        path = export_for_model(load_model(model))
    except OSError as e:
        raise ImgtxtError(f"could not export the CNN: {e}") from None
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


@dataset_arg
@click.argument("model", type=PathType)
@data_dir_opt
@click.option("--output", type=PathType, required=True, help="The new model folder")
@click.option("--top-k", type=int, default=10, show_default=True, help="Classes combined per photo")
@click.option("--class-text", type=click.Choice(["names", "definitions"]), default="names", show_default=True,
              help="A class's sentence and caption: its name alone, or its name and WordNet definition")
@click.option("--json", "as_json", is_flag=True, help="Print the val table as one JSON object")
@quiet_opt
def add_concepts(dataset, model, data_dir, output, top_k, class_text, as_json, quiet):
    """Add the ConSE bridge to a model.

    The backbone's ImageNet classifier and the sentence vectors of its 1,000 class names join the model, with
    fusion weights chosen on DATASET's val split; the class names join the caption bank. Needs torch.

    MODEL is a model folder (a MiniLM model).
    """
    from imgtxt.research.concepts_fit import add_concepts as run

    if not 1 <= top_k <= 1000:
        raise UsageError("--top-k must be between 1 and 1000")
    folder = dataset_folder(dataset, data_dir)
    result = run(model, output, dataset, folder, top_k=top_k, quiet=quiet, class_text=class_text)
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"weight {result['weight']} + {result['confidence_weight']} x confidence -> {output}")


@fit_on_split_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Fit on each caption's this many best photos (the results a search shows).")
@click.option("--strong-removed", type=click.FloatRange(0, 1), default=0.10, show_default=True,
              help="At most this share of captions whose own photo is removed get a strong top result.")
@click.option("--possible-removed", type=click.FloatRange(0, 1), default=0.50, show_default=True,
              help="... and at most this share a possible (or strong) one.")
@click.option("--dry-run", is_flag=True, help="Print the figures; leave model.json as it is.")
@quiet_opt
def calibrate(model, dataset, data_dir, split, top, strong_removed, possible_removed, dry_run, quiet):
    """Fit a model's score calibration (confidence and levels).

    Fitted on a dataset split, written into MODEL/model.json ("calibration"; the model id stays), and measured
    there: how often a caption's top result is strong / possible / weak with its own photo in the gallery and
    removed from it.

    MODEL is a model folder (default: $IMGTXT_MODEL, else the shipped model).
    """
    from imgtxt.research.calibrate import calibrate as fit_calibration
    from imgtxt.research.calibrate import format_figures, write_calibration

    if strong_removed > possible_removed:
        raise UsageError("--strong-removed must not exceed --possible-removed")
    loaded, fitted = _fit_on_split("calibrate", model, dataset, data_dir, split, lambda m, folder: fit_calibration(
        m, dataset, folder, split, top, strong_removed, possible_removed, quiet))
    click.echo(format_figures(fitted))
    if not dry_run:
        try:
            path = write_calibration(loaded.folder, fitted)
        except OSError as e:
            raise ImgtxtError(f"could not write the calibration into {loaded.folder}: {e}") from None
        click.echo(f"wrote the calibration into {path}", err=True)


@fit_on_split_options
@click.option("--dry-run", is_flag=True, help="Print the figures; leave model.json as it is.")
@quiet_opt
def tune_search(model, dataset, data_dir, split, dry_run, quiet):
    """Fit a model's search corrections (hubness, query gate).

    Chosen on a dataset split and written into MODEL/model.json ("search"). The hubness setting is part of
    the model id: indexes made before re-embed their photos, and `imgtxt calibrate` must be run again.

    MODEL is a model folder (default: $IMGTXT_MODEL, else the shipped model).
    """
    from imgtxt.research.search_fit import tune_search as fit_search
    from imgtxt.research.search_fit import write_search

    loaded, section = _fit_on_split("tune-search", model, dataset, data_dir, split,
                                    lambda m, folder: fit_search(m, dataset, folder, split, quiet))
    table = section["fitted_on"]
    for row in table["hubness_table"]:
        click.echo(f"hubness top_k {row['top_k']:>3} weight {row['weight']:.2f}: t2i {row['t2i']} sum {row['t2i_sum']:.2f}")
    for row in table.get("gate_table", []):
        click.echo(f"query gate gain {row['gain']:>4.1f}: rsum {row['rsum']:.2f} (t2i {row['t2i']})")
    chosen = {k: v for k, v in section.items() if k != "fitted_on"}
    click.echo(f"chosen: {json.dumps(chosen)}")
    if not dry_run:
        try:
            path = write_search(loaded.folder, section)
        except OSError as e:
            raise ImgtxtError(f"could not write the search section into {loaded.folder}: {e}") from None
        click.echo(f"wrote it into {path}; run `imgtxt calibrate` again", err=True)



@fit_on_split_options
@click.option("--dry-run", is_flag=True, help="Print the figures; leave the model as it is.")
@quiet_opt
def tune_captions(model, dataset, data_dir, split, dry_run, quiet):
    """Fit a model's caption hubness correction.

    Captions close to very many photos lose score in `imgtxt caption` and in eval's photo -> text recall; with a
    ConSE bridge, its share of a photo's caption scores (the concept scale, val only vetoing) and, where the
    classifier sees one thing, more say from it (the photo gate). Chosen on a
    dataset split against reference photos from its train split; written into MODEL
    (caption_offsets.safetensors, model.json "caption_hubness"). Search and the model id are unchanged.

    MODEL is a model folder (default: $IMGTXT_MODEL, else the shipped model).
    """
    from imgtxt.model import caption_offsets
    from imgtxt.research.caption_fit import tune_captions as fit_captions

    loaded, (section, reference, offsets, table) = _fit_on_split(
        "tune-captions", model, dataset, data_dir, split,
        lambda m, folder: fit_captions(m, dataset, folder, split, quiet))
    for row in table:
        click.echo(f"caption hubness top_k {row['top_k']:>3} weight {row['weight']:.2f}: i2t {row['i2t']} "
                   f"sum {row['i2t_sum']:.2f}")
    for row in section.get("fitted_on", {}).get("scale_table", []):
        click.echo(f"concept scale {row['scale']:.2f}: i2t {row['i2t']} sum {row['i2t_sum']:.2f}")
    for row in section.get("fitted_on", {}).get("gate_table", []):
        click.echo(f"photo gate gain {row['gain']:.2f}: i2t {row['i2t']} sum {row['i2t_sum']:.2f}")
    click.echo(f"chosen: {json.dumps({k: v for k, v in section.items() if k != 'fitted_on'})}")
    if not dry_run:
        try:
            caption_offsets.write(loaded.folder, reference, offsets, section)
        except OSError as e:
            raise ImgtxtError(f"could not write the caption hubness into {loaded.folder}: {e}") from None
        click.echo(f"wrote it into {loaded.folder}", err=True)



@fit_on_split_options
@click.option("--bias", type=click.FloatRange(0), default=0.0, show_default=True,
              help="What every class line loses (given, not fitted).")
@click.option("--dry-run", is_flag=True, help="Print the figures; leave the model as it is.")
@quiet_opt
def tune_caption_prior(model, dataset, data_dir, split, bias, dry_run, quiet):
    """Fit how much the classifier says on the caption bank's class lines.

    In `imgtxt caption`, a class line ("A photo of an espresso.") gains weight x the classifier's probability
    for its class (less --bias), so the class the classifier is sure of can come first. The weight is the largest
    that costs a dataset split's scenes at most 1 point of right first captions (even-numbered photos; the
    odd-numbered ones are shown held out); written into MODEL/model.json ("caption_prior"). Run tune-captions
    first. Search and the model id are unchanged.

    MODEL is a model folder (default: $IMGTXT_MODEL, else the shipped model).
    """
    from imgtxt.model.caption_prior import RECORD_KEY
    from imgtxt.paths import writing
    from imgtxt.research.caption_prior_fit import tune_caption_prior as fit_prior

    loaded, (section, table) = _fit_on_split(
        "tune-caption-prior", model, dataset, data_dir, split,
        lambda m, folder: fit_prior(m, dataset, folder, split, bias, quiet))
    for row in table:
        click.echo(f"caption prior weight {row['weight']:.2f} bias {row['bias']:.2f}: first caption right "
                   f"{row['fit']:.1f}% (held out {row['held_out']:.1f}%)")
    click.echo(f"chosen: {json.dumps({k: v for k, v in section.items() if k != 'fitted_on'})}")
    if not dry_run:
        path = loaded.folder / "model.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
            config[RECORD_KEY] = section
            with writing(path) as f:
                f.write((json.dumps(config, indent=2) + "\n").encode("utf-8"))
        except (OSError, ValueError) as e:
            raise ImgtxtError(f"could not write the caption prior into {path}: {e}") from None
        click.echo(f"wrote it into {path}", err=True)

@fit_on_split_options
@click.option("--queries", "queries_file", type=PathType,
              help="More queries for the benchmark: query<TAB>right photo files (comma-separated)<TAB>kind per line "
                   "(bench/mixed_library.py writes one for the everyday-object photos).")
@click.option("--photos", "photos_dir", type=PathType, help="The folder of the photos that --queries names.")
@click.option("--reference-photos", "more_reference", type=PathType,
              help="Add this folder's photos to the reference photos (bench/mixed_library.py --caltech writes one: "
                   "things Flickr8k never shows, so that a query for them is rated on the same scale).")
@click.option("--strong-removed", type=click.FloatRange(0, 1), default=0.10, show_default=True,
              help="At most this share of any kind's queries whose right photos are removed get a strong top result.")
@click.option("--possible-removed", type=click.FloatRange(0, 1), default=0.50, show_default=True,
              help="... and at most this share a possible (or strong) one.")
@click.option("--rank", type=click.IntRange(1, 100), default=None,
              help="Fix the baseline's form: the query's RANK-th best reference score (default: the form that comes "
                   "closest to the targets on the benchmark is chosen).")
@click.option("--concept-weight", type=click.FloatRange(0), default=0.0,
              help="With --rank: raise the baseline by this much per unit of the query's ConSE weight.")
@click.option("--concept-scale", type=click.FloatRange(0), default=0.0,
              help="With --rank: divide score - baseline by 1 + this x the query's ConSE weight.")
@click.option("--dry-run", is_flag=True, help="Print the figures; leave the model as it is.")
@quiet_opt
def calibrate_search(model, dataset, data_dir, split, queries_file, photos_dir, more_reference, strong_removed,
                     possible_removed, rank, concept_weight, concept_scale, dry_run, quiet):
    """Fit the per-query confidence of search results.

    A result is measured by its score above the query's own baseline: its rank-th best score over reference photos
    (the training split's, one in 6, and the photos of --reference-photos, stored with the model as
    query_reference.safetensors), raised for queries
    that lean on the ConSE part (and their margins scaled down); so levels mean the same for a caption, a short
    phrase and a thing's name. Fitted on a benchmark that mixes query kinds (the split's captions, short phrases
    from them, and the kinds of --queries), the baseline's form included, and written into MODEL/model.json
    ("calibration.search"). Run `imgtxt calibrate` first.

    MODEL is a model folder (default: $IMGTXT_MODEL, else the shipped model).
    """
    from imgtxt.model import search_confidence
    from imgtxt.research import reference_photos
    from imgtxt.research import search_confidence_fit as fitting

    if strong_removed > possible_removed:
        raise UsageError("--strong-removed must not exceed --possible-removed")
    if rank is None and (concept_weight or concept_scale):
        raise UsageError("--concept-weight and --concept-scale fix the form with --rank")
    form = None if rank is None else fitting.Form(rank, concept_weight, concept_scale)
    if more_reference is not None:
        try:
            reference_photos.photo_files(more_reference)
        except ValueError as e:
            raise UsageError(f"--reference-photos {e}") from None

    def run(loaded, folder):
        if loaded.calibration is None:
            raise ValueError(f"{loaded.folder}: run `imgtxt calibrate` first (captions keep that calibration)")
        reference = reference_photos.reference_vectors(loaded, dataset, folder, quiet, more_reference)
        bench = fitting.build(loaded, dataset, folder, reference, split, queries_file, photos_dir, quiet)
        fitted = fitting.fit(bench, None, strong_removed, possible_removed, form)
        return reference, bench, fitted

    loaded, (reference, bench, fitted) = _fit_on_split("calibrate-search", model, dataset, data_dir, split, run)
    for row in fitted.table:
        click.echo(f"baseline rank {row['rank']:>3}: best concept weight {row['concept_weight']:.3f}, concept "
                   f"scale {row['concept_scale']:.2f}, target score {row['target_score']:.4f}")
    calibration, chosen = fitted.calibration, fitted.form
    figures = fitting.measured(fitted, bench)
    held = fitting.held_out(bench, strong_removed, possible_removed, form)
    click.echo(f"baseline = the query's best reference score at rank {chosen.rank} + {chosen.concept_weight:.3f} c, "
               f"scale = 1 + {chosen.concept_scale:.2f} c (c: the query's ConSE weight)")
    click.echo(f"confidence = 1 / (1 + exp(-({calibration.slope:.4f} * (score - baseline) / scale "
               f"{'-' if calibration.intercept < 0 else '+'} {abs(calibration.intercept):.4f}))); strong from "
               f"{calibration.strong:.4f}, possible from {calibration.possible:.4f}")
    click.echo(fitting.format_figures(figures, f"in sample ({bench.photos} photos):"))
    click.echo(fitting.format_figures(held, "out of sample (half the queries of each kind fit, the other half measured):"))
    if not dry_run:
        fitted_on = {"dataset": dataset, "split": split, "photos": bench.photos,
                     "reference": reference_photos.describe(dataset, more_reference),
                     "queries": {k: bench.kinds.count(k) for k in dict.fromkeys(bench.kinds)},
                     "strong_removed_max": strong_removed, "possible_removed_max": possible_removed,
                     "form": "given" if form is not None else "chosen",
                     "forms": fitted.table, "model_id": loaded.model_id}
        try:
            search_confidence.write(loaded.folder, reference, calibration, chosen.rank,
                                    {"fitted_on": fitted_on, "figures": figures, "held_out": held},
                                    chosen.concept_weight, chosen.concept_scale)
        except (OSError, ValueError) as e:
            raise ImgtxtError(f"could not write the search confidence into {loaded.folder}: {e}") from None
        click.echo(f"wrote the search confidence into {loaded.folder / 'model.json'}", err=True)


COMMANDS = (("export-cnn", export_cnn), ("add-concepts", add_concepts), ("tune-search", tune_search),
            ("calibrate", calibrate), ("calibrate-search", calibrate_search), ("tune-captions", tune_captions),
            ("tune-caption-prior", tune_caption_prior))
