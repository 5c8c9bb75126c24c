"""The `imgtxt` command line: a thin click layer over `imgtxt.Library` (library.py).

Imports are deferred into each command so that query commands (`search`, `status`) start without loading
torch. Every error is an ImgtxtError; `Commands.invoke` prints it as one line and exits non-zero.
The CLI is plain click (as Simon Willison's `llm` is): typer 0.2x validates every option through pydantic,
whose import alone was ~40% of a cold `imgtxt search`.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from imgtxt import __version__
from imgtxt.errors import ImgtxtError
from imgtxt.safe_text import printable

from .progress import CaptionProgress
from .progress import say as _say

PHOTOS = "Photos"


RESEARCH_COMMANDS = ("features", "train", "eval", "backbone-download", "export-cnn", "add-concepts",
                     "tune-search", "calibrate", "calibrate-search", "tune-captions", "tune-caption-prior",
                     "package-model",
                     "extend-captions")  # research.py


class Commands(click.Group):
    """The commands in the order they were added, under their section headings, photo commands first. The
    research commands are built on first use: their ~70 options cost a query command ~20 ms to declare."""

    def list_commands(self, ctx):
        return list(dict.fromkeys([*self.commands, *RESEARCH_COMMANDS]))  # the everyday commands first

    def get_command(self, ctx, name):
        if name in RESEARCH_COMMANDS and name not in self.commands:
            from .research import register

            register(command)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        sections: dict[str, list] = {}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if not command.hidden:
                sections.setdefault(getattr(command, "section", "Commands"), []).append((name, command))
        width = formatter.width - 6 - max((len(n) for rows in sections.values() for n, _ in rows), default=0)
        for section, rows in sections.items():
            with formatter.section(section):
                formatter.write_dl([(name, command.get_short_help_str(width)) for name, command in rows])

    def invoke(self, ctx):
        from .output import GuardedStdout, OutputError, silence_stdout

        stdout = sys.stdout
        sys.stdout = GuardedStdout(stdout)  # stdout closed, full, or in an encoding without the characters
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()
            return result
        except ImgtxtError as e:
            if isinstance(e, OutputError) and stdout is sys.__stdout__:
                silence_stdout()  # what is still buffered cannot be written either: no second complaint
            if not getattr(e, "quiet", False):  # names from the command line may hold ESC or newlines
                click.echo(f"imgtxt: {printable(str(e))}", err=True)
            raise click.exceptions.Exit(getattr(e, "exit_code", 1)) from None
        finally:
            sys.stdout = stdout


@click.group(cls=Commands, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
@click.version_option(__version__, "--version", message="imgtxt %(version)s", help="Print the version and exit.")
def app():
    """Search a photo folder by sentence and caption photos, with a Full-Network-Embedding joint image-text
    model. Works offline."""


def command(name: str | None = None, section: str = PHOTOS):
    """app.command that also files the command under a heading of `imgtxt --help`."""
    def register(function):
        made = app.command(name)(function)
        made.section = section
        return made
    return register


class SafePath(click.Path):
    """click.Path whose errors show control characters in the path as escapes."""

    def fail(self, message, param=None, ctx=None):
        super().fail(printable(message), param, ctx)


PathType = SafePath(path_type=Path)
PathText = SafePath()   # kept as typed: Path('') would be '.', and an unset variable must not mean "here"
index_opt = click.option("--index", "index_dir", type=PathType, default=None,
                         help="Index folder (default: $IMGTXT_INDEX_DIR, else $XDG_DATA_HOME/imgtxt).")
model_opt = click.option("--model", type=PathType, default=None,
                         help="Model folder (default: $IMGTXT_MODEL, else the model shipped with imgtxt).")
query_model_opt = click.option("--model", type=PathType, default=None,
                               help="Model folder (default: $IMGTXT_MODEL, else the one the index was built with).")
json_opt = click.option("--json", "as_json", is_flag=True, help="One JSON object per line on stdout.")
all_copies_opt = click.option("--all-copies", is_flag=True, help="List identical files (same bytes) separately.")
null_opt = click.option("-0", "--null", is_flag=True, help="Paths only, each ended by a NUL byte (for xargs -0).")
count_opt = click.option("-n", "n", type=click.IntRange(min=1), default=10, show_default=True,
                         help="Number of photos.")


def _library(index_dir, model):
    from imgtxt.library.photo_library import Library

    return Library(index_dir, model)


def _print_photos(matches, as_json: bool, preview: bool = False, library=None, null: bool = False) -> None:
    from .output import print_hits

    for line in library.notices if library is not None else []:
        _say(f"imgtxt: {line}")
    if not matches:
        click.echo("imgtxt: no photos match", err=True)
        return
    if not as_json and not null and sys.stdout.isatty() and matches[0].level is not None \
            and all(m.level != "strong" for m in matches):
        click.echo("imgtxt: no strong matches; the closest photos:", err=True)  # pipes and --json: the level says it
    if preview and not as_json:
        from .preview import print_with_thumbnails

        print_with_thumbnails(matches, library)
    else:
        print_hits(matches, "path", as_json, null=null)


@command("index")
@click.argument("paths", nargs=-1, required=True, type=PathText)
@click.option("--exclude", multiple=True, help="Skip files or folders matching this glob (repeatable).")
@index_opt
@model_opt
@click.option("--batch-size", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="Photos per database commit (and per CNN batch, up to 64).")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Decoding threads.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no per-file messages.")
@click.option("--prune", is_flag=True, help="Remove the photos of a folder that is missing or empty now "
              "(by default they are kept: an unplugged drive looks the same).")
@click.option("--rebuild", is_flag=True, help="Build a new database from the photos of these folders and swap it in "
              "when complete (for a damaged index): other folders are kept as they were, known vectors reused by "
              "content; the old file is kept as index.db.damaged (numbered if taken).")
@click.option("--ray", metavar="ADDRESS", default=None,
              help="Embed on a Ray cluster: its address (ray://host:10001, auto), or 'local' for a Ray instance on "
                   "this machine. Needs the ray extra.")
@click.option("--previews", is_flag=True, help="Embed a photo from its embedded preview (a camera JPEG's MPF picture, a "
              "HEIC thumbnail) when that is at least the CNN's input size: several times faster to decode.")
def index_photos(paths, exclude, index_dir, model, batch_size, workers, as_json, quiet, prune, rebuild, ray, previews):
    """Index photo folders, incrementally.

    PATHS are folders (or single photos), indexed recursively. New and changed photos are embedded, moved ones
    recognised by their content; Ctrl-C keeps what is done.
    """
    progress = not quiet and sys.stderr.isatty()
    summary = _library(index_dir, model).index(
        list(paths), list(exclude), batch_size=batch_size, workers=workers, progress=progress, log=None if quiet else _say,
        notice=_say, on_model_load=(lambda: _say("imgtxt: loading model…")) if progress else None,
        prune=prune, rebuild=rebuild, ray_address=ray, previews=previews)
    if as_json:
        out = summary.as_dict()
        out["skipped_files"] = [{"path": p, "reason": r} for p, r in sorted(summary.skipped.items())]
        out["device"] = summary.device
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    else:
        if summary.device and not quiet and not progress:   # (on a terminal it was said before the bar)
            _say(f"imgtxt: the CNN ran on {summary.device}")
        click.echo(summary.line())


@command()
@click.argument("text", nargs=-1)
@count_opt
@click.option("--after", metavar="DATE", help="Taken on or after this year, month or day (2019, 2019-06, 2019-06-14).")
@click.option("--before", metavar="DATE", help="Taken before the end of this year, month or day.")
@click.option("--in", "folder", type=PathText, metavar="FOLDER", help="Only photos under this folder.")
@click.option("--near", metavar="PLACE", help="Only photos taken in or near this place (GPS): a city, region or "
              "country.")
@click.option("--like", type=PathText, metavar="PHOTO", help="Photos like this one (indexed or not), and like "
              "TEXT when given.")
@click.option("--min-score", default=None, metavar="SCORE|LEVEL",
              help="Leave out photos scoring below this score, or below this level of a calibrated model: strong, "
                   "possible (the same for every query).")
@click.option("--preview", is_flag=True, help="Show thumbnails in terminals that can draw images (kitty, iTerm2, "
              "sixel).")
@all_copies_opt
@index_opt
@query_model_opt
@json_opt
@null_opt
def search(text, n, after, before, folder, near, like, min_score, preview, all_copies, index_dir, model, as_json,
           null):
    """Find photos by sentence, date, place, folder, or likeness.

    TEXT is what the photo shows, e.g. `imgtxt search a dog running on the beach` (quotes optional); a year,
    month or season in it is read as when the photo was taken (`beach 2019`, `snow in december`), and words
    of folder, file and place names count too.
    """
    if not text and like is None and not any((after, before, folder, near)):
        raise ImgtxtError("give what the photo shows (TEXT), or --like PHOTO, --after, --before, --in or --near")
    import os

    # One query is a few dozen small matmuls: a BLAS thread pool only adds wake-ups, which cost most on a busy
    # machine. Set before numpy loads (search never imports it earlier); a user's own setting wins.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    library = _library(index_dir, model)
    try:   # a number is a score; anything else must be a level's name
        min_score = float(min_score) if min_score is not None else None
    except ValueError:
        from imgtxt.model.calibration import LEVELS

        if min_score.strip().lower() not in LEVELS:
            raise ImgtxtError(f"--min-score must be a number or one of {', '.join(LEVELS)}, not "
                             f"{printable(min_score)[:40]!r}") from None
    if isinstance(min_score, float) and not math.isfinite(min_score):   # nan, inf, 1e400
        raise ImgtxtError(f"--min-score must be a finite number, not {min_score}")
    matches = library.search(" ".join(text), n, min_score, all_copies, after=after, before=before, folder=folder,
                             near=near, like=like)
    if library.reading:
        _say(f"imgtxt: {printable(library.reading)}")
    _print_photos(matches, as_json, preview, library, null)


@command()
@click.argument("photo", type=PathType)
@click.option("-n", "n", type=click.IntRange(min=1), default=5, show_default=True, help="Number of captions.")
@click.option("--captions", type=PathType, default=None,
              help="Caption candidates, one per line (default: the model's training captions).")
@index_opt
@query_model_opt
@json_opt
def caption(photo, n, captions, index_dir, model, as_json):
    """The captions that best describe a photo.

    PHOTO need not be indexed.
    """
    from imgtxt.library.query import read_captions

    from .output import print_hits

    library = _library(index_dir, model)
    with CaptionProgress() as report:
        hits = library.caption(photo, n, read_captions(captions) if captions else None,
                               on_compute=report.announce, progress=report.progress)
    for line in library.notices:
        _say(f"imgtxt: {line}")
    print_hits(hits, "caption", as_json)


@command()
@click.argument("photo", type=PathType)
@count_opt
@all_copies_opt
@index_opt
@query_model_opt
@json_opt
@null_opt
def similar(photo, n, all_copies, index_dir, model, as_json, null):
    """Indexed photos that look most like a photo.

    PHOTO may be indexed or not.
    """
    library = _library(index_dir, model)
    _print_photos(library.similar(photo, n, all_copies), as_json, library=library, null=null)


@command()
@index_opt
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout (photos, skipped, model, "
              "index_dir, db, last_run, folders, forgotten); with --skipped, then one line per skipped file.")
@click.option("--skipped", is_flag=True, help="Also list the skipped files and why.")
def status(index_dir, as_json, skipped):
    """What is indexed.

    The indexed folders with their photo counts, skipped files, the model, where the index lives, the last run.
    """
    from .output import print_status, printable

    library = _library(index_dir, None)
    report = library.status()
    print_status(report.as_dict(), as_json)
    if not as_json and report.folders:
        sys.stdout.write("folders:\n")
        for folder in report.folders:
            sys.stdout.write(f"  {folder.photos:>7}  {printable(folder.path)}\n")
    if not as_json and report.forgotten:
        sys.stdout.write("forgotten (left out of `imgtxt index` until indexed by name):\n")
        for path in report.forgotten:
            sys.stdout.write(f"  {printable(path)}\n")
    if skipped:
        for path, reason in library.skipped():
            sys.stdout.write(json.dumps({"path": path, "reason": reason}, ensure_ascii=False) + "\n" if as_json
                             else f"{printable(path)}\t{printable(reason)}\n")


@command()
@index_opt
@query_model_opt
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port to listen on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (default: this machine only).")
@click.option("--allow-host", multiple=True, metavar="NAME",
              help="Also answer requests for this host name (repeatable), e.g. the machine's name when "
                   "--host 0.0.0.0 exposes it on purpose. localhost, 127.0.0.1, [::1] and --host always are.")
def serve(index_dir, model, port, host, allow_host):
    """Browse and search the index in a web browser.

    A search box, thumbnails with scores; click a photo for its captions and similar photos.
    """
    from imgtxt.web.app import check_installed, run

    check_installed()  # before anything slow
    library = _library(index_dir, model)
    library.status()  # no index: say so before listening

    def prepare(done):
        """The caption bank's vectors (read from the model, or embedded once for one that ships none), made ready
        while the server already answers."""
        announced = []

        def announce(count):
            _say(f"imgtxt: embedding {count} captions once, in the background (photo pages show captions "
                 f"when done)")
            announced.append(count)
        try:
            library.prepare_captions(announce)
            if announced:
                _say("imgtxt: captions ready")
        except ImgtxtError as e:
            _say(f"imgtxt: no captions: {e}")
        except Exception as e:  # noqa: BLE001 - a background thread: one line, never a traceback
            _say(f"imgtxt: no captions: {type(e).__name__}: {e}")
        finally:
            done()

    run(library, host, port, allow_host, prepare, say=_say)


@command()
@click.option("--threshold", type=click.FloatRange(0, 1, min_open=True), default=None, metavar="COSINE",
              help="How alike two photos' vectors must be to count as near duplicates (default: the shipped "
                   "model's, chosen on a dev set; higher: fewer, surer groups).")
@index_opt
@query_model_opt
@json_opt
def duplicates(threshold, index_dir, model, as_json):
    """Groups of identical files and near duplicates (resized, re-encoded, burst shots), largest first.

    Lists them only: nothing is deleted or moved.
    """
    from .output import print_duplicates

    groups = _library(index_dir, model).duplicates(threshold)
    print_duplicates(groups, as_json)
    files = sum(len(g.photos) for g in groups)
    _say(f"imgtxt: {len(groups)} groups of duplicates ({sum(g.kind == 'exact' for g in groups)} exact, "
         f"{sum(g.kind == 'near' for g in groups)} near) holding {files} files; nothing was changed"
         if groups else "imgtxt: no duplicates found")


@command()
@click.argument("path", type=PathText)
@index_opt
def forget(path, index_dir):
    """Remove a folder or photo from the index, and keep it out.

    PATH is a folder or a photo; the files stay where they are. Later `imgtxt index` runs of a folder above it
    leave it out, until PATH (or a path inside it) is given to `imgtxt index` again. `imgtxt status` lists what
    is forgotten.
    """
    library = _library(index_dir, None)
    removed = library.forget(path)
    import os

    where = printable(os.path.abspath(path))
    click.echo(f"forgot {removed} photos under {where}; {library.status().photos} photos indexed; "
               f"`imgtxt index` leaves it out until you index {where} itself again")
