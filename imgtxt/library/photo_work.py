"""The work one photo needs before the CNN, done in worker threads (or Ray tasks): hash it, decode it.

Both only read the file, never block on a FIFO or device (regular_opener), and turn every failure into a
reason string or an ImageError, so one bad file never stops a run.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

import numpy as np

from imgtxt.model.images import ImageError, NotRegularFile, load_rgb, regular_opener


# A file whose ctime is this recent when it is hashed may be written again within its timestamps' granularity (a
# coarse clock tick) without its stamp changing: such a file is hashed again when it is decoded.
SETTLED_SECONDS = 2.0


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _hash_open(f) -> tuple[str, tuple | None]:
    """(hash of the rest of the open file, its stamp when no write can have gone unseen during the read, else None)."""
    before = _stamp(os.fstat(f.fileno()))
    digest = hashlib.sha256()
    while chunk := f.read(1 << 20):
        digest.update(chunk)
    after = _stamp(os.fstat(f.fileno()))
    settled = before == after and time.time_ns() - after[4] > SETTLED_SECONDS * 1e9
    return digest.hexdigest()[:32], after if settled else None


def file_hash(path: str) -> str:
    """sha256 of the whole file (128 bits kept): any edit changes it. With the SHA CPU extensions that
    x86 and ARM servers have, it costs 2.2 ms per 3.5 MB photo here against blake2b's 4.1 ms."""
    with open(path, "rb", opener=regular_opener) as f:   # never blocks on a FIFO or device
        return _hash_open(f)[0]


def content_hash(data: bytes) -> str:
    """file_hash of bytes read already."""
    return hashlib.sha256(data).hexdigest()[:32]


def read_photo(path: str, hashed: tuple[tuple, str] | None = None) -> tuple[bytes, str]:
    """The file's bytes and their hash, from one read: what is decoded is what the hash names, even when the
    file is rewritten meanwhile (a vector or thumbnail stored under another content's hash would never heal).
    hashed: (stamp, hash) from hash_work; when the file still has that stamp after this read, nothing wrote to it
    since it was hashed (a write sets its ctime to now, past a settled one), and the hash is not computed again
    (a 12-MP photo's sha256 is ~3 ms of its ~70 ms of indexing, docs/indexing.md)."""
    with open(path, "rb", opener=regular_opener) as f:
        data = f.read()
        if hashed is not None and hashed[0] == _stamp(os.fstat(f.fileno())):
            return data, hashed[1]
    return data, content_hash(data)


@dataclass
class Work:
    path: str
    size: int
    mtime_ns: int
    existing: dict | None           # the photos row at this path, if any
    hash: str | None = None
    error: str | None = None
    stamp: tuple[int, int] | None = None   # (inode, ctime_ns) as scanned: with size and mtime, the file's identity
    hashed: tuple[tuple, str] | None = None   # (the file's stamp, its hash) when hash_work read it settled


def hash_work(work: Work) -> Work:
    try:
        with open(work.path, "rb", opener=regular_opener) as f:   # never blocks on a FIFO or device
            work.hash, stamp = _hash_open(f)
        work.hashed = (stamp, work.hash) if stamp is not None else None
    except NotRegularFile:
        work.error = "not a regular file"
    except OSError as e:
        work.error = "permission denied" if isinstance(e, PermissionError) else f"unreadable ({e.strerror or e})"
    return work


def decode(work: Work, size: int, previews: bool = False):
    """(square (size, size, 3) uint8, width, height) or an ImageError. Runs in a worker thread.
    previews: from the file's embedded preview when it has a usable one (images.load_rgb).
    The file is read once: `work.hash` becomes the hash of the bytes decoded (the file may have been rewritten
    since it was hashed), so a vector is always stored under the hash of its own bytes."""
    from PIL import Image

    try:
        data, decoded_hash = read_photo(work.path, work.hashed)
        image = load_rgb(work.path, min_side=size, previews=previews, data=data)
        del data
        work.hash = decoded_hash
        width, height = image.info["original_size"]  # the true size: draft mode decoded a reduced one
        if (image.width < image.height) != (width < height) and image.width != image.height:
            width, height = height, width       # EXIF rotation
        return np.asarray(image.resize((size, size), Image.BILINEAR), dtype=np.uint8), width, height
    except ImageError as e:
        return e
    except NotRegularFile:
        return ImageError("not a regular file")
    except OSError as e:
        return ImageError(f"unreadable ({e})")
