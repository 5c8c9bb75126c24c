"""Embedded previews: a smaller copy of the photo stored in the file, decoded instead of the main picture.

The CNN needs ~256 px, and most camera files carry a copy near that size: camera JPEGs an MPF "large
thumbnail" (e.g. 1616x1212: 6 ms to decode against ~43 ms for the 12-MP picture at draft scale), HEIC files a
thumbnail item, camera RAW files a full JPEG (the only picture usable without demosaicing), EXIF a thumbnail
(usually 160x120: too small, so almost never used). A preview is used only when it is at least `min_side` px on
its short side and has the main picture's aspect ratio, so a gain map, depth map or stereo view is never taken for
the photo. It is turned by the main picture's EXIF orientation (MPF and EXIF previews) or LibRaw's (RAW).
"""
from __future__ import annotations

import io

from PIL import ExifTags, Image

from imgtxt.errors import ImgtxtError, install_hint

RAW_SUFFIXES = {".dng", ".cr2", ".cr3", ".nef", ".arw", ".raf", ".orf", ".rw2"}
PREVIEW_MIN_SIDE = 256   # never a preview under this short side, whatever the CNN's input size

# MPF image types that are the same picture at a smaller size (CIPA DC-007 5.2.3.3.1). Others in the wild:
# "Undefined" (Android Ultra HDR gain maps), disparity and multi-angle views, which are not the photo.
MPF_PREVIEW_TYPES = {"Large Thumbnail (VGA Equivalent)", "Large Thumbnail (Full HD Equivalent)"}

ORIENTATION = 0x0112
# LibRaw's sizes.flip -> the EXIF orientation that turns the embedded JPEG upright
RAW_FLIP_TO_ORIENTATION = {0: 1, 3: 3, 5: 8, 6: 6}
TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
             5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
             8: Image.Transpose.ROTATE_90}


class RawError(ImgtxtError):
    """A camera RAW file that cannot be used: no reader installed, or no preview LibRaw can extract."""


def raw_hint() -> str:
    """The skip reason of a camera RAW file without rawpy: the install that adds it, worded for this install (a
    checkout or a wheel), as every other install hint is."""
    return f"camera RAW photo (needs rawpy: {install_hint('raw')})"


def raw_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("rawpy") is not None


def exif_orientation(im: Image.Image) -> int:
    try:
        value = int(im.getexif().get(ORIENTATION, 1))
    except (TypeError, ValueError, SyntaxError, OSError):
        return 1
    return value if value in TRANSPOSE else 1


def orient(im: Image.Image, orientation: int) -> Image.Image:
    return im.transpose(TRANSPOSE[orientation]) if orientation in TRANSPOSE else im


def usable(size: tuple[int, int], main: tuple[int, int], min_side: int) -> bool:
    """A preview big enough for the CNN, smaller than the picture, with its aspect ratio (1% for rounding)."""
    (w, h), (mw, mh) = size, main
    return min(w, h) >= min_side and w * h < mw * mh and abs(w * mh - h * mw) <= 0.01 * mw * mh


def mpf_preview(im: Image.Image, min_side: int) -> bool:
    """Seek an MPO image to its smallest usable MPF large thumbnail; False (left at frame 0) when it has none."""
    entries = (getattr(im, "mpinfo", None) or {}).get(0xB002)
    if not isinstance(entries, list) or getattr(im, "n_frames", 1) < 2:
        return False
    main = im.size
    best = None
    for frame, entry in enumerate(entries[1:im.n_frames], start=1):
        if entry.get("Attribute", {}).get("MPType") not in MPF_PREVIEW_TYPES:
            continue
        try:
            im.seek(frame)   # reads the frame's header only
        except (OSError, EOFError, ValueError, SyntaxError):
            continue
        if usable(im.size, main, min_side) and (best is None or im.width * im.height < best[1]):
            best = (frame, im.width * im.height)
    im.seek(best[0] if best else 0)
    return best is not None


def exif_thumbnail(im: Image.Image, min_side: int) -> Image.Image | None:
    """The EXIF (IFD1) JPEG thumbnail when it is usable (rarely: most are 160x120), else None."""
    data = im.info.get("exif")
    if not data:
        return None
    try:
        ifd1 = im.getexif().get_ifd(ExifTags.IFD.IFD1)
        offset, length = int(ifd1[0x0201]), int(ifd1[0x0202])
    except (KeyError, TypeError, ValueError, SyntaxError, OSError):
        return None
    tiff = data[6:] if data.startswith(b"Exif\x00\x00") else data
    if length <= 0 or offset + length > len(tiff):
        return None
    try:
        thumb = Image.open(io.BytesIO(tiff[offset:offset + length]))
    except (OSError, ValueError, SyntaxError):
        return None
    if thumb.format == "JPEG" and usable(thumb.size, im.size, min_side):
        return thumb
    thumb.close()
    return None


def embedded_preview(im: Image.Image, min_side: int) -> tuple[Image.Image, int | None]:
    """The image to decode instead of `im` (possibly `im` itself, seeked to a preview frame) and the EXIF
    orientation to apply to it; (im, None) when there is no usable preview (the caller orients as usual).
    A HEIC thumbnail item is chosen by pillow-heif's own draft(), not here."""
    min_side = max(min_side, PREVIEW_MIN_SIDE)
    if im.format == "MPO":
        orientation = exif_orientation(im)
        if mpf_preview(im, min_side):
            return im, orientation
    if im.format in ("JPEG", "MPO"):
        thumb = exif_thumbnail(im, min_side)
        if thumb is not None:
            return thumb, exif_orientation(im)
    return im, None


def raw_preview(file) -> tuple[Image.Image, int, tuple[int, int]]:
    """(the embedded preview of a camera RAW file, the orientation to apply, the sensor picture's size)."""
    try:
        import rawpy
    except ImportError:
        raise RawError(raw_hint()) from None
    try:
        with rawpy.imread(file) as raw:
            thumb = raw.extract_thumb()
            flip, size = raw.sizes.flip, (raw.sizes.width, raw.sizes.height)
    except rawpy.LibRawNoThumbnailError:
        raise RawError("camera RAW without an embedded preview") from None
    except (rawpy.LibRawError, OSError, ValueError) as e:
        raise RawError(f"not a camera RAW file LibRaw can read ({type(e).__name__})") from None
    if thumb.format == rawpy.ThumbFormat.JPEG:
        image = Image.open(io.BytesIO(thumb.data))
    else:
        image = Image.fromarray(thumb.data)
    return image, RAW_FLIP_TO_ORIENTATION.get(flip, 1), size
