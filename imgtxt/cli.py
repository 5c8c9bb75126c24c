"""The `imgtxt` command line: a thin layer over `imgtxt.Library` (library.py).

Imports are deferred into each command so that query commands (`search`, `status`) start without loading
torch. Every error is an ImgtxtError; `Commands.invoke` prints it as one line and exits non-zero.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup, TyperOption

from . import __version__
from .errors import ImgtxtError


class Commands(TyperGroup):
    def list_commands(self, ctx):
        return list(self.commands)  # as registered: the everyday commands first

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ImgtxtError as e:
            typer.echo(f"imgtxt: {e}", err=True)
            raise typer.Exit(getattr(e, "exit_code", 1)) from None


def _flags_without_a_type(option_class) -> None:
    """Typer 0.2x prints `--json <bool>` in help, as if the flag took a value: show flags bare."""
    shown = getattr(option_class, "display_type_rich", None)
    if shown is not None and not getattr(shown, "_imgtxt", False):
        def display_type_rich(self, ctx):
            return None if getattr(self, "is_flag", False) else shown(self, ctx)

        display_type_rich._imgtxt = True
        option_class.display_type_rich = display_type_rich


_flags_without_a_type(TyperOption)

app = typer.Typer(
    cls=Commands, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Search a photo folder by sentence and caption photos, with a Full-Network-Embedding "
         "joint image-text model. Works offline.",
)
PHOTOS = "Photos"

IndexOpt = typer.Option(None, "--index", help="Index folder (default: $IMGTXT_INDEX_DIR, else "
                                               "$XDG_DATA_HOME/imgtxt).")
ModelOpt = typer.Option(None, "--model", help="Model folder (default: $IMGTXT_MODEL, else the model "
                                               "shipped with imgtxt).")
QueryModelOpt = typer.Option(None, "--model", help="Model folder (default: $IMGTXT_MODEL, else the one the "
                                                    "index was built with).")
JsonOpt = typer.Option(False, "--json", help="One JSON object per line on stdout.")
AllCopies = typer.Option(False, "--all-copies", help="List identical files (same bytes) separately.")
NullOpt = typer.Option(False, "-0", "--null", help="Paths only, each ended by a NUL byte (for xargs -0).")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"imgtxt {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")):
    """Search a photo folder by sentence and caption photos. Works offline."""


def _library(index_dir, model):
    from .library import Library

    return Library(index_dir, model)


def _say(message: str) -> None:
    """stderr, above a progress bar if one is showing."""
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)


def _print_photos(matches, as_json: bool, preview: bool = False, library=None, null: bool = False) -> None:
    from .output import print_hits

    for line in library.notices if library is not None else []:
        _say(f"imgtxt: {line}")
    if not matches:
        typer.echo("imgtxt: no photos match", err=True)
    elif preview and not as_json:
        from .preview import print_with_thumbnails

        print_with_thumbnails(matches, library)
    else:
        print_hits(matches, "path", as_json, null=null)


class CaptionProgress:
    """The one-time embedding of a caption bank (minutes for 30,000 captions): a message, then a bar with ETA."""

    def __enter__(self):
        self.bar = None
        return self

    def announce(self, count: int) -> None:
        _say(f"imgtxt: embedding {count} captions once (cached for next time)...")

    def progress(self, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, unit="caption", file=sys.stderr, disable=not sys.stderr.isatty())
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


@app.command("index", rich_help_panel=PHOTOS)
def index_photos(
    paths: list[Path] = typer.Argument(..., help="Folders (or single photos) to index, recursively."),
    exclude: list[str] = typer.Option([], "--exclude", help="Skip files or folders matching this glob (repeatable)."),
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = ModelOpt,
    batch_size: int = typer.Option(32, min=1, help="Photos per CNN batch and per database commit."),
    workers: int = typer.Option(2, min=1, help="Decoding threads."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no per-file messages."),
    prune: bool = typer.Option(False, "--prune", help="Remove the photos of a folder that is missing or empty now "
                               "(by default they are kept: an unplugged drive looks the same)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build a new database from the photos and swap it in when "
                                 "complete (for a damaged index; the old file is kept as index.db.damaged)."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS",
                                      help="Embed on a Ray cluster: its address (ray://host:10001, auto), "
                                           "or 'local' for a Ray instance on this machine. Needs the ray extra."),
):
    """Index photo folders incrementally: new and changed photos are embedded, moved ones recognised."""
    progress = not quiet and sys.stderr.isatty()
    summary = _library(index_dir, model).index(
        paths, exclude, batch_size=batch_size, workers=workers, progress=progress, log=None if quiet else _say,
        notice=_say, on_model_load=(lambda: _say("imgtxt: loading model…")) if progress else None,
        prune=prune, rebuild=rebuild, ray_address=ray)
    if as_json:
        out = summary.as_dict()
        out["skipped_files"] = [{"path": p, "reason": r} for p, r in sorted(summary.skipped.items())]
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    else:
        typer.echo(summary.line())


@app.command(rich_help_panel=PHOTOS)
def search(
    text: list[str] = typer.Argument(..., help='What the photo shows, e.g. a dog running on the beach '
                                               '(quotes optional).'),
    n: int = typer.Option(10, "-n", min=1, help="Number of photos."),
    min_score: Optional[float] = typer.Option(None, "--min-score", help="Leave out photos scoring below this."),
    preview: bool = typer.Option(False, "--preview", help="Show thumbnails in terminals that can draw "
                                                          "images (kitty, iTerm2, sixel)."),
    all_copies: bool = AllCopies,
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    as_json: bool = JsonOpt,
    null: bool = NullOpt,
):
    """Find photos by sentence."""
    import os

    # One query is a few dozen small matmuls: a BLAS thread pool only adds wake-ups, which cost most on a busy
    # machine. Set before numpy loads (search never imports it earlier); a user's own setting wins.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    library = _library(index_dir, model)
    _print_photos(library.search(" ".join(text), n, min_score, all_copies), as_json, preview, library, null)


@app.command(rich_help_panel=PHOTOS)
def caption(
    photo: Path = typer.Argument(..., help="A photo (need not be indexed)."),
    n: int = typer.Option(5, "-n", min=1, help="Number of captions."),
    captions: Optional[Path] = typer.Option(None, "--captions", help="Caption candidates, one per line "
                                            "(default: the model's training captions)."),
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    as_json: bool = JsonOpt,
):
    """The captions that best describe a photo."""
    from .output import print_hits
    from .query import read_captions

    with CaptionProgress() as report:
        hits = _library(index_dir, model).caption(photo, n, read_captions(captions) if captions else None,
                                                  on_compute=report.announce, progress=report.progress)
    print_hits(hits, "caption", as_json)


@app.command(rich_help_panel=PHOTOS)
def similar(
    photo: Path = typer.Argument(..., help="A photo (indexed or not)."),
    n: int = typer.Option(10, "-n", min=1, help="Number of photos."),
    all_copies: bool = AllCopies,
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    as_json: bool = JsonOpt,
    null: bool = NullOpt,
):
    """Indexed photos that look most like a photo."""
    library = _library(index_dir, model)
    _print_photos(library.similar(photo, n, all_copies), as_json, library=library, null=null)


@app.command(rich_help_panel=PHOTOS)
def status(
    index_dir: Optional[Path] = IndexOpt,
    as_json: bool = JsonOpt,
    skipped: bool = typer.Option(False, "--skipped", help="Also list the skipped files and why."),
):
    """What is indexed: folders, photos, skipped files, model, where the index lives, last run."""
    from .output import print_status, printable

    library = _library(index_dir, None)
    report = library.status()
    print_status(report.as_dict(), as_json)
    if not as_json and report.folders:
        sys.stdout.write("folders:\n")
        for folder in report.folders:
            sys.stdout.write(f"  {folder.photos:>7}  {printable(folder.path)}\n")
    if skipped:
        for path, reason in library.skipped():
            sys.stdout.write(json.dumps({"path": path, "reason": reason}, ensure_ascii=False) + "\n" if as_json
                             else f"{printable(path)}\t{printable(reason)}\n")


@app.command(rich_help_panel=PHOTOS)
def serve(
    index_dir: Optional[Path] = IndexOpt,
    model: Optional[Path] = QueryModelOpt,
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
):
    """Browse and search the index in a web browser: thumbnails, captions, similar photos."""
    from .web import run

    library = _library(index_dir, model)
    library.status()  # no index: say so before anything slow
    with CaptionProgress() as report:  # photo pages show captions: embed the bank before the first click
        library.prepare_captions(report.announce, report.progress)
    run(library, host, port)


@app.command(rich_help_panel=PHOTOS)
def forget(
    path: Path = typer.Argument(..., help="A folder or photo to remove from the index (files are not touched)."),
    index_dir: Optional[Path] = IndexOpt,
):
    """Remove a folder or photo from the index; the files stay where they are."""
    library = _library(index_dir, None)
    removed = library.forget(path)
    typer.echo(f"forgot {removed} photos under {path.absolute()}; {library.status().photos} photos indexed")


def _register_research() -> None:
    from .cli_research import register

    register(app)


_register_research()
