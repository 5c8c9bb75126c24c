"""`imgtxt search --preview`: thumbnails inline in terminals that can draw images.

textual-image asks the terminal whether it speaks the kitty graphics protocol or sixel (iTerm2, WezTerm,
foot, Konsole, xterm -ti vt340 ...). Anywhere else — a pipe, a plain terminal, the optional package not
installed — the usual text output is printed instead.
"""
from __future__ import annotations

import sys

from .output import print_hits


def image_class():
    """textual-image's renderable for this terminal when it can show real pixels, else None."""
    if not sys.stdout.isatty():
        return None
    try:
        from textual_image import renderable
    except ImportError:
        return None
    return renderable.Image if renderable.Image in (renderable.SixelImage, renderable.TGPImage) else None


def print_with_thumbnails(matches, library, size: int = 256, rows: int = 8) -> None:
    image = image_class()
    if image is None:
        print_hits(matches, "path")
        return
    from rich.console import Console

    from imgtxt.errors import ImgtxtError
    from imgtxt.safe_text import printable

    console = Console()
    for m in matches:  # names escaped as in the plain table: an ESC in a file name must not drive the terminal
        also = f"  (same photo: {', '.join(printable(c) for c in m.copies)})" if m.copies else ""
        console.print(f"{m.rank:>4}  {m.score:>7.3f}  {printable(m.path)}{also}", markup=False, highlight=False)
        try:
            console.print(image(library.thumbnail(m.id, size), height=rows))
        except ImgtxtError as e:  # unreadable now: the text line is still useful
            console.print(f"      (no preview: {printable(str(e))})", markup=False, highlight=False)
