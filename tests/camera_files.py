"""Writers for the camera file kinds the preview path reads: JPEGs with an MPF preview or an EXIF thumbnail, and
a minimal DNG (a JPEG preview plus a small CFA raw) that LibRaw opens. Shared by tests and bench/."""
from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
from PIL import Image

MPF_LARGE_THUMBNAIL_FULL_HD = 0x010002


def jpeg_bytes(image: Image.Image, quality: int = 90, **params) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality, **params)
    return buf.getvalue()


def write_mpf_jpeg(path: Path, main: Image.Image, preview: Image.Image, orientation: int = 1,
                   mptype: int = MPF_LARGE_THUMBNAIL_FULL_HD, quality: int = 90,
                   preview_orientation: int | None = None) -> Path:
    """A camera-style JPEG: `main` with `preview` as its second MPF picture of type `mptype` (Pillow writes
    "Undefined"; cameras write a large-thumbnail type, patched in here), EXIF orientation on the main picture.
    Pillow copies the EXIF to the preview; preview_orientation rewrites the preview's own orientation tag."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    main.save(buf, format="MPO", save_all=True, append_images=[preview], exif=exif.tobytes(), quality=quality)
    data = bytearray(buf.getvalue())
    tiff = data.index(b"MPF\x00") + 4                  # Pillow writes the MP index little-endian
    (ifd,) = struct.unpack_from("<L", data, tiff + 4)
    (count,) = struct.unpack_from("<H", data, tiff + ifd)
    for i in range(count):
        tag, _, _, value = struct.unpack_from("<HHLL", data, tiff + ifd + 2 + 12 * i)
        if tag == 0xB002:  # MP entries, 16 bytes each: the second picture's attribute is at +16
            data[tiff + value + 16:tiff + value + 20] = struct.pack("<L", mptype)
    if preview_orientation is not None:
        with Image.open(io.BytesIO(bytes(data))) as im:
            start = im._MpoImageFile__mpoffsets[1]
        entry = struct.pack(">HHLH", 0x0112, 3, 1, orientation)   # Pillow writes EXIF big-endian
        at = data.index(entry, start)
        data[at:at + len(entry)] = struct.pack(">HHLH", 0x0112, 3, 1, preview_orientation)
    Path(path).write_bytes(bytes(data))
    return Path(path)


TYPES = {"B": (1, "B"), "A": (2, "B"), "H": (3, "H"), "L": (4, "I")}


class TiffWriter:
    """Just enough little-endian TIFF to write DNG and EXIF structures by hand."""

    def __init__(self):
        self.out = bytearray(b"II*\x00\0\0\0\0")

    def place(self, data: bytes) -> int:
        offset = len(self.out)
        self.out.extend(data)
        if len(self.out) % 2:
            self.out.append(0)
        return offset

    def ifd(self, entries: list[tuple[int, str, object]], next_ifd: int = 0) -> int:
        """Write an IFD (values over 4 bytes after it); returns its offset."""
        entries = sorted(entries, key=lambda e: e[0])
        start = len(self.out)
        size = 2 + 12 * len(entries) + 4
        body, extra = bytearray(struct.pack("<H", len(entries))), bytearray()
        for tag, kind, values in entries:
            code, fmt = TYPES[kind]
            values = list(values.encode() + b"\0") if kind == "A" else list(values)
            data = struct.pack("<" + fmt * len(values), *values)
            if len(data) <= 4:
                body += struct.pack("<HHI", tag, code, len(values)) + data.ljust(4, b"\0")
            else:
                body += struct.pack("<HHII", tag, code, len(values), start + size + len(extra))
                extra += data + (b"\0" if len(data) % 2 else b"")
        body += struct.pack("<I", next_ifd)
        self.out.extend(body + extra)
        return start

    def set_first_ifd(self, offset: int) -> bytes:
        self.out[4:8] = struct.pack("<I", offset)
        return bytes(self.out)


def write_dng(path: Path, preview: Image.Image, orientation: int = 1, raw_size=(64, 48)) -> Path:
    """A minimal DNG LibRaw opens: IFD0 is `preview` as a JPEG (NewSubFileType 1, as cameras store it) with the
    orientation, one SubIFD holds a small 16-bit RGGB CFA picture."""
    jpeg = jpeg_bytes(preview)
    (pw, ph), (rw, rh) = preview.size, raw_size
    cfa = (np.arange(rw * rh, dtype=np.uint16) % 4000).tobytes()
    tiff = TiffWriter()
    jpeg_at, cfa_at = tiff.place(jpeg), tiff.place(cfa)
    raw_ifd = tiff.ifd([(254, "L", [0]), (256, "L", [rw]), (257, "L", [rh]), (258, "H", [16]), (259, "H", [1]),
                        (262, "H", [32803]), (273, "L", [cfa_at]), (277, "H", [1]), (278, "L", [rh]),
                        (279, "L", [len(cfa)]), (33421, "H", [2, 2]), (33422, "B", [0, 1, 1, 2])])
    ifd0 = tiff.ifd([(254, "L", [1]), (256, "L", [pw]), (257, "L", [ph]), (258, "H", [8, 8, 8]), (259, "H", [7]),
                     (262, "H", [6]), (271, "A", "Canon"), (272, "A", "Test"), (273, "L", [jpeg_at]),
                     (274, "H", [orientation]), (277, "H", [3]), (278, "L", [ph]), (279, "L", [len(jpeg)]),
                     (330, "L", [raw_ifd]), (50706, "B", [1, 4, 0, 0]), (50708, "A", "Test Camera")])
    Path(path).write_bytes(tiff.set_first_ifd(ifd0))
    return Path(path)


def write_exif_thumbnail_jpeg(path: Path, main: Image.Image, thumbnail: Image.Image, orientation: int = 1) -> Path:
    """A JPEG whose EXIF carries `thumbnail` in IFD1 (JPEGInterchangeFormat), as cameras write it."""
    thumb = jpeg_bytes(thumbnail)
    tiff = TiffWriter()
    thumb_at = tiff.place(thumb)
    ifd1 = tiff.ifd([(259, "H", [6]), (0x0201, "L", [thumb_at]), (0x0202, "L", [len(thumb)])])
    ifd0 = tiff.ifd([(0x0112, "H", [orientation])], next_ifd=ifd1)
    exif = b"Exif\x00\x00" + tiff.set_first_ifd(ifd0)
    Path(path).write_bytes(jpeg_bytes(main, exif=exif))
    return Path(path)
