"""What people remember of a photo besides what it shows: when it was taken, where, and the words of its folder
and file name. Read from the file's header (EXIF) at index time into the photo_facts and photo_words tables.

- When: EXIF DateTimeOriginal (else DateTimeDigitized, else DateTime) as the camera's wall-clock time, with
  OffsetTimeOriginal when the camera wrote it; a photo without any is dated by its file's mtime, in this
  machine's time zone, marked `taken_from = 'mtime'` (a copy's mtime is the copy's date, not the photo's).
- Where: EXIF GPS latitude / longitude, named by places.py (the nearest GeoNames place) when that is installed.
- Words: the folder path below the indexed folder (the indexed folder's own name included) and the file name
  without its extension, split on separators and camelCase, lower-cased and without accents, numbers left
  out ("2019 Germany trip/IMG_0412.JPG" -> germany, trip, img), plus the words of the place's names.

A run reads only photos whose facts are missing or are of another version of the file (path, size, mtime), so
an index from an earlier imgtxt gains them on its next run without re-embedding anything.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime

from .name_words import words_of
from .photo_paths import is_under, real_path

EXIF_IFD, GPS_IFD = 0x8769, 0x8825
DATE_TAGS = ((0x9003, 0x9011), (0x9004, 0x9012))  # (DateTimeOriginal, OffsetTimeOriginal), (Digitized, its offset)
DATETIME, OFFSET_TIME = 0x0132, 0x9010
OFFSET = re.compile(r"^[+-]\d\d:\d\d$")


@dataclass
class Facts:
    taken: str | None            # 'YYYY-MM-DDTHH:MM:SS', the wall-clock time where the photo was taken
    taken_offset: str | None     # '+02:00' when EXIF says it
    taken_from: str              # 'exif' or 'mtime'
    latitude: float | None = None
    longitude: float | None = None


def path_words(key: str, roots: list[str]) -> list[str]:
    """The words of a photo's folders below (and including) the indexed folder that holds it, and of its name."""
    root = max((r for r in roots if is_under(key, [r])), key=len, default=None)
    folder, name = os.path.split(key)
    if root is not None and root != key:
        below = os.path.relpath(folder, os.path.dirname(root.rstrip(os.sep)) or os.sep)
    else:
        below = os.path.basename(folder)
    return words_of(below.replace(os.sep, " ") + " " + os.path.splitext(name)[0])


def _exif_text(value) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return value.strip("\x00 ") if isinstance(value, str) else None


def exif_time(exif) -> tuple[str, str | None] | None:
    """(wall-clock time, offset or None) from EXIF, or None when it has no usable date."""
    ifd = exif.get_ifd(EXIF_IFD)
    candidates = [(ifd.get(t), ifd.get(o)) for t, o in DATE_TAGS] + [(exif.get(DATETIME), ifd.get(OFFSET_TIME))]
    for raw, raw_offset in candidates:
        text = _exif_text(raw)
        if not text:
            continue
        try:   # EXIF's own format, "2019:07:14 15:30:00"; blank or "0000:00:00 00:00:00" when unset
            when = datetime.strptime(text[:19], "%Y:%m:%d %H:%M:%S")
        except ValueError:
            continue
        offset = _exif_text(raw_offset)
        return when.isoformat(), offset if offset and OFFSET.match(offset) else None
    return None


def _degrees(value, ref) -> float | None:
    try:
        d, m, s = (float(x) for x in value)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    out = d + m / 60 + s / 3600
    ref = _exif_text(ref) or ""
    return -out if ref.upper() in ("S", "W") else out


def exif_position(exif) -> tuple[float, float] | None:
    """(latitude, longitude) from the GPS IFD, or None (none, malformed, or the 0,0 some cameras write)."""
    gps = exif.get_ifd(GPS_IFD)
    if not gps:
        return None
    lat, lon = _degrees(gps.get(2), gps.get(1)), _degrees(gps.get(4), gps.get(3))
    if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180) or (lat, lon) == (0.0, 0.0):
        return None
    return lat, lon


def read_facts(path: str, mtime_ns: int) -> Facts:
    """A photo's facts from its header; a file Pillow cannot read (RAW without the extra, a damaged header) is
    dated by its mtime and has no position."""
    from PIL import Image

    from imgtxt.model.images import regular_opener

    taken, position = None, None
    try:
        with open(path, "rb", opener=regular_opener) as f, Image.open(f) as image:
            exif = image.getexif()
            taken, position = exif_time(exif), exif_position(exif)
    except Exception:  # noqa: BLE001 - any unreadable header: the mtime and no position, never a failed run
        pass
    if taken is not None:
        facts = Facts(taken[0], taken[1], "exif")
    else:
        facts = Facts(datetime.fromtimestamp(mtime_ns / 1e9).replace(microsecond=0).isoformat(), None, "mtime")
    if position is not None:
        facts.latitude, facts.longitude = position
    return facts


def update(store, roots: list[str], notice=None, batch: int = 500) -> int:
    """Fill the facts of the photos under `roots` that have none, or have those of another version of the file;
    drop those of removed photos. Returns how many photos were read."""
    from . import places

    db = store.db
    stale = db.execute(
        "SELECT p.id, p.path, p.path_bytes, p.size, p.mtime_ns FROM photos p LEFT JOIN photo_facts f ON f.id = p.id "
        "WHERE f.id IS NULL OR f.path != p.path OR f.size != p.size OR f.mtime_ns != p.mtime_ns").fetchall()
    stale = [row for row in stale if is_under(row[1], roots)]
    if len(stale) >= 1000 and notice is not None:   # an index from before these facts: a while, once
        notice(f"imgtxt: reading the dates, places and folder words of {len(stale)} photos (once)")
    namer = places.Namer(notice)
    from .index_meta import meta_folders

    known_roots = sorted(set(meta_folders(store.meta())) | set(roots))
    from imgtxt.model.images import in_order

    for start in range(0, len(stale), batch):
        rows = []   # headers read by two threads (file reads release the GIL), in order
        for (photo_id, key, raw, size, mtime_ns), facts in in_order(
                lambda row: read_facts(real_path(row[1], row[2]), row[4]), stale[start:start + batch], 2):
            place = namer.name(facts.latitude, facts.longitude)
            words = set(path_words(key, known_roots)) | set(places.words(place))
            rows.append((photo_id, key, size, mtime_ns, facts, place, words))
        with db.atomic():
            for photo_id, key, size, mtime_ns, facts, place, words in rows:
                db.execute("INSERT OR REPLACE INTO photo_facts VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                           [photo_id, key, size, mtime_ns, facts.taken, facts.taken_offset, facts.taken_from,
                            facts.latitude, facts.longitude, *place[:3]])
                db.execute("DELETE FROM photo_words WHERE id = ?", [photo_id])
                db.conn.executemany("INSERT OR IGNORE INTO photo_words VALUES (?, ?)", [(w, photo_id) for w in words])
    with db.atomic():
        db.execute("DELETE FROM photo_facts WHERE id NOT IN (SELECT id FROM photos)")
        db.execute("DELETE FROM photo_words WHERE id NOT IN (SELECT id FROM photos)")
    places.name_unnamed(store, namer)
    return len(stale)
