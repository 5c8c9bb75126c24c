"""Thumbnails of indexed photos, made once and kept in the cache folder (never next to the photos).

<cache dir>/thumbnails/<size>/<content hash>.jpg: keyed by content, so copies of a photo share one file and an
edited photo (new hash) gets a new one. Written to a temporary name and renamed, so a reader never sees half a file.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from imgtxt.paths import cache_dir


def thumbnail_path(content_hash: str, size: int) -> Path:
    return cache_dir() / "thumbnails" / str(int(size)) / f"{content_hash}.jpg"


def thumbnail(photo: str, content_hash: str, size: int = 256) -> Path:
    """The cached thumbnail of `photo` (longest side `size`), made now if missing. Raises ImageError."""
    from PIL import Image

    from imgtxt.model.images import load_rgb, register_heif

    path = thumbnail_path(content_hash, size)
    if path.is_file():
        return path
    register_heif()
    image = load_rgb(photo, min_side=size)  # upright RGB; JPEGs decode at a reduced scale
    image.thumbnail((size, size), Image.LANCZOS)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")  # server threads
    image.save(tmp, "JPEG", quality=85)
    os.replace(tmp, path)
    return path
