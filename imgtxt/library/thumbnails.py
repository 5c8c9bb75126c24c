"""Thumbnails of indexed photos, made once and kept in the cache folder (never next to the photos).

<cache dir>/thumbnails/<size>/<content hash>.jpg, where the hash is of the file as it is now (not the one
recorded at indexing): an edited photo, or one edited and restored, never shows another picture, and copies
share one file. A file name is made only from that hex digest and an int, so nothing read from an index can
steer a write or a read outside the folder. A thumbnail is a copy of a photo: folders are created 0700 and
files 0600, whatever the umask, so another user of the machine cannot read them. Written to a temporary name
and renamed, so a reader never sees half a file.
"""
from __future__ import annotations

import io
import os
import re
from pathlib import Path

from imgtxt.errors import ImgtxtError
from imgtxt.model.images import ImageError, NotRegularFile
from imgtxt.paths import cache_dir, private_dirs, writing
from imgtxt.safe_text import printable

from .photo_work import read_photo

_HASH = re.compile(r"[0-9a-f]{32}")
MIN_SIZE, MAX_SIZE = 16, 4096


class ThumbnailCacheError(ImgtxtError):
    """The thumbnail was made but cannot be kept (disk full, read-only cache): `jpeg` holds it, to show anyway."""

    def __init__(self, message: str, jpeg: bytes):
        super().__init__(message)
        self.jpeg = jpeg


def thumbnail_folder(size: int) -> Path:
    return cache_dir() / "thumbnails" / str(int(size))


def thumbnail_path(content_hash: str, size: int) -> Path:
    if not isinstance(content_hash, str) or not _HASH.fullmatch(content_hash):
        raise ValueError(f"not a content hash: {content_hash!r}")
    return thumbnail_folder(size) / f"{content_hash}.jpg"


def private_folder(folder: Path) -> Path:
    """`folder` and the missing folders above it created 0700; the thumbnails folder itself made 0700 even
    when an older version created it open (its files were then readable by anyone)."""
    thumbnails = cache_dir() / "thumbnails"
    private_dirs(folder)
    if thumbnails.stat().st_mode & 0o077:
        os.chmod(thumbnails, 0o700)
    return folder


def thumbnail(photo: str, size: int = 256) -> Path:
    """The cached thumbnail of `photo` (longest side `size`), made now if missing.

    Raises ImageError (a file that is gone, unreadable or not a photo) or ThumbnailCacheError."""
    from PIL import Image

    from imgtxt.model.images import load_rgb, register_heif

    if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ImgtxtError(f"a thumbnail size is {MIN_SIZE} to {MAX_SIZE} pixels, not {str(size)[:20]}")
    try:
        data, content_hash = read_photo(photo)   # one read: the picture is of the bytes its name says
        path = thumbnail_path(content_hash, size)
    except FileNotFoundError:
        raise ImageError(f"{printable(photo)}: no such file (moved or deleted since it was indexed)") from None
    except NotRegularFile:
        raise ImageError(f"{printable(photo)}: not a regular file") from None
    except OSError as e:
        raise ImageError(f"{printable(photo)}: cannot read ({e.strerror or e})") from None
    if path.is_file():
        return path
    register_heif()
    image = load_rgb(photo, min_side=size, data=data)  # upright RGB; JPEGs decode at a reduced scale
    del data
    image.thumbnail((size, size), Image.LANCZOS)
    jpeg = io.BytesIO()
    image.save(jpeg, "JPEG", quality=85)
    try:
        private_folder(path.parent)
        with writing(path, 0o600) as f:   # a temporary name per thread (server threads); none left on Ctrl-C
            f.write(jpeg.getvalue())
    except OSError as e:
        raise ThumbnailCacheError(f"cannot keep a thumbnail in {printable(str(path.parent))} "
                                  f"({e.strerror or e})", jpeg.getvalue()) from None
    return path
