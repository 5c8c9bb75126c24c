"""`imgtxt search --preview`: thumbnails inline in terminals that can draw images.

textual-image asks the terminal whether it speaks the kitty graphics protocol or sixel (iTerm2, WezTerm,
foot, Konsole, xterm -ti vt340 ...). Anywhere else — a pipe, a plain terminal, the optional package not
installed — the usual text output is printed instead, and one line on stderr says why.
"""
from __future__ import annotations

import sys

from .output import print_hits


def no_pictures_reason() -> str | None:
    """Why this output cannot show pictures (one line), or None when it can."""
    if not sys.stdout.isatty():
        return "the output is not a terminal"
    try:
        from textual_image import renderable
    except ImportError:
        from imgtxt.errors import install_hint

        return f"the preview extra is not installed ({install_hint('preview')})"
    if renderable.Image not in (renderable.SixelImage, renderable.TGPImage):
        return "this terminal cannot draw images (kitty, iTerm2, WezTerm or a sixel terminal can)"
    return None


def image_class():
    """textual-image's renderable for this terminal when it can show real pixels, else None."""
    if no_pictures_reason() is not None:
        return None
    from textual_image import renderable

    return renderable.Image


def print_with_thumbnails(matches, library, size: int = 256, rows: int = 8) -> None:
    image = image_class()
    if image is None:
        from .progress import say

        say(f"imgtxt: --preview shows no pictures: {no_pictures_reason()}")
        print_hits(matches, "path")
        return
    from rich.console import Console

    from imgtxt.errors import ImgtxtError
    from imgtxt.safe_text import printable

    console = Console()
    for m in matches:  # names escaped as in the plain table: an ESC in a file name must not drive the terminal
        also = f"  (same photo: {', '.join(printable(c) for c in m.copies)})" if m.copies else ""
        level = f"{m.level:<8}  " if m.level else ""
        console.print(f"{m.rank:>4}  {m.score:>7.3f}  {level}{printable(m.path)}{also}", markup=False, highlight=False,
                      soft_wrap=True)  # a long path stays one line (copyable), as in the plain table
        try:
            console.print(image(library.thumbnail(m.id, size), height=rows))
        except ImgtxtError as e:  # unreadable now: the text line is still useful
            console.print(f"      (no preview: {printable(str(e))})", markup=False, highlight=False)
