"""Decoding photos into RGB arrays, robustly and fast (Pillow only; no torch).

JPEGs are decoded with Pillow's draft mode, which lets libjpeg scale by 1/2, 1/4 or 1/8 while
decoding: for a 12-MP photo that is most of the decode cost saved, and we only need ~256 px.
EXIF orientation is applied so a rotated phone photo is seen upright.
"""
from __future__ import annotations

import io
import os
import stat
import warnings
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps
from PIL.JpegImagePlugin import JpegImageFile

from imgtxt.errors import ImgtxtError

from .previews import (
    PREVIEW_MIN_SIDE,
    RAW_SUFFIXES,
    RawError,
    embedded_preview,
    orient,
    raw_preview,
)

# Refuse images whose pixel count could exhaust memory (Pillow's own bomb check raises on > 2x this).
MAX_PIXELS = 180_000_000
Image.MAX_IMAGE_PIXELS = MAX_PIXELS // 2
ImageFile.LOAD_TRUNCATED_IMAGES = False

PHOTO_SUFFIXES = {".jpg", ".jpeg", ".jpe", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
HEIF_SUFFIXES = {".heic", ".heif"}


def heif_available() -> bool:
    try:
        import pillow_heif  # noqa: F401
    except ImportError:
        return False
    return True


def register_heif() -> bool:
    """Let Pillow open HEIC/HEIF when the optional pillow-heif extra is installed."""
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        return False
    register_heif_opener()
    return True


class ImageError(ImgtxtError):
    """A file that cannot be used as a photo; str(e) is a short reason for the user."""


class NotRegularFile(OSError):
    pass


def regular_opener(path, flags: int = os.O_RDONLY) -> int:
    """An `opener` for open() that accepts regular files only.

    O_NONBLOCK makes opening a FIFO (or a device) return at once instead of waiting for a writer, and the type
    is checked on the open descriptor (fstat), so a file swapped for a FIFO after it was scanned cannot hang
    a run. For regular files O_NONBLOCK changes nothing."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{os.fsdecode(path)}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: Path | str):
    """A binary file object for a regular file, never anything else (see regular_opener)."""
    return open(path, "rb", opener=regular_opener)


def load_rgb(path: Path | str, min_side: int = 256, previews: bool = False, data: bytes | None = None) -> Image.Image:
    """Open a photo as an upright RGB image whose shorter side is still >= min_side if it was.

    previews: decode the smallest embedded preview of at least min_side px (MPF, EXIF, HEIC thumbnail) instead
    of the main picture when the file has one (`previews`). Camera RAW files always give their preview.
    Raises ImageError with a one-line reason for anything that is not a usable photo.
    data: the file's bytes, read already (the caller hashed them: the picture is then of exactly those bytes).
    """
    path = Path(path)
    try:
        with warnings.catch_warnings(), ExitStack() as stack:
            # Pillow warns (instead of raising) for images just over MAX_IMAGE_PIXELS: make it an error.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            file = stack.enter_context(open_regular(path) if data is None else io.BytesIO(data))
            orientation = None  # None: the image's own EXIF orientation (exif_transpose)
            if path.suffix.lower() in RAW_SUFFIXES:
                im, orientation, original_size = raw_preview(file)
                stack.enter_context(im)
            else:
                im = stack.enter_context(Image.open(file))
                original_size = im.size  # before draft() shrinks it: callers need the photo's true size
            if im.width * im.height > MAX_PIXELS:
                raise ImageError(f"too many pixels ({im.width}x{im.height}), refusing as a decompression bomb")
            if previews and orientation is None:
                preview, orientation = embedded_preview(im, min_side)
                if preview is not im:  # an EXIF thumbnail: its own Image, closed with the file
                    im = stack.enter_context(preview)
            else:
                im.seek(0)  # animated GIF/WebP: the first frame
            w, h = im.size
            scale = min_side / max(1, min(w, h))
            if previews and im.format == "HEIF":
                scale = max(min_side, PREVIEW_MIN_SIDE) / max(1, min(w, h))
            if scale < 1 and (isinstance(im, JpegImageFile) or (previews and im.format == "HEIF")):
                # JPEG (MPO included): the largest 1/2^k DCT scale that keeps both sides >= the request.
                # HEIF: pillow-heif's draft() picks the smallest thumbnail item at least that large.
                im.draft("RGB", (max(1, int(w * scale)), max(1, int(h * scale))))
            im.load()
            im = ImageOps.exif_transpose(im) if orientation is None else orient(im, orientation)
            if im.mode in ("RGBA", "LA", "P", "PA") or "transparency" in im.info:
                # Transparent pixels over white, rather than whatever colour they hide.
                rgba = im.convert("RGBA")
                background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                im = Image.alpha_composite(background, rgba).convert("RGB")
            elif im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
                # 16-bit/float greyscale: scale to 8 bits instead of clipping everything to white.
                arr = np.asarray(im, dtype=np.float64)
                top = arr.max() or 1.0
                im = Image.fromarray(np.clip(arr * (255.0 / top), 0, 255).astype(np.uint8)).convert("RGB")
            else:
                im = im.convert("RGB")  # CMYK, L, YCbCr, ...
            im.info["original_size"] = original_size
            return im
    except ImageError:
        raise
    except RawError as e:
        raise ImageError(str(e)) from None
    except NotRegularFile:
        raise ImageError("not a regular file") from None
    except FileNotFoundError:
        raise ImageError("file not found") from None
    except PermissionError:
        raise ImageError("permission denied") from None
    except IsADirectoryError:
        raise ImageError("is a directory") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError(f"decompression bomb refused ({e})") from None
    except Image.UnidentifiedImageError:
        size = path.stat().st_size if path.exists() else 0
        raise ImageError("empty file" if size == 0 else "not an image Pillow can read") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        # Truncated or corrupt data surfaces as OSError ("image file is truncated", "broken data stream").
        raise ImageError(f"corrupt or truncated image ({e})") from None


def load_square(path: Path | str, size: int) -> np.ndarray:
    """A photo squashed to (size, size, 3) uint8: the FNE's fixed-size resize (paper 4.3.3)."""
    image = load_rgb(path, min_side=size)
    return np.asarray(image.resize((size, size), Image.BILINEAR), dtype=np.uint8)


def in_order(function, items, workers: int = 2, prefetch: int = 64):
    """function(item) for each item, computed by a thread pool ahead of use, yielded in input order.

    Pillow (and hashlib) release the GIL, so decoding overlaps the CNN's batches."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        pending: deque = deque()
        for item in items:
            pending.append((item, pool.submit(function, item)))
            if len(pending) >= prefetch:
                item, future = pending.popleft()
                yield item, future.result()
        while pending:
            item, future = pending.popleft()
            yield item, future.result()


def iter_squares(paths, size: int, workers: int = 2, prefetch: int = 64):
    """Yield (path, array or ImageError) in input order, decoding ahead of use."""

    def work(p):
        try:
            return load_square(p, size)
        except ImageError as e:
            return e

    return in_order(work, paths, workers, prefetch)
