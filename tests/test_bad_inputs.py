"""A folder of everything that goes wrong with real photo collections: the run completes, every bad file is
reported with its reason, and every good photo (including the odd but valid ones) is indexed."""
from __future__ import annotations

import json
import os
import sqlite3
import struct
import zlib

import numpy as np
import pytest
from conftest import write_photo
from PIL import Image

import imgtxt.library.photo_work


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int, height: int) -> bytes:
    """A tiny file whose header claims width x height pixels."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        png_chunk(b"IEND", b"")


def exif_rotated_jpeg(path):
    """A 120x60 landscape JPEG whose EXIF says 'rotate 90° clockwise to view' (orientation 6)."""
    image = Image.fromarray(np.random.default_rng(5).integers(0, 255, (60, 120, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6
    image.save(path, exif=exif.tobytes())


@pytest.fixture()
def zoo(tmp_path):
    d = tmp_path / "zoo"
    good, bad = {}, {}
    # --- valid photos in awkward formats: all must be indexed
    good["normal.jpg"] = write_photo(d / "normal.jpg", 1)
    good["cmyk.jpg"] = d / "cmyk.jpg"
    Image.new("CMYK", (64, 48), (20, 120, 200, 10)).save(good["cmyk.jpg"])
    good["16bit.png"] = d / "16bit.png"
    Image.fromarray((np.arange(64 * 48, dtype=np.uint16).reshape(48, 64) * 20)).save(good["16bit.png"])
    assert Image.open(good["16bit.png"]).mode.startswith("I")
    good["palette_transparent.png"] = d / "palette_transparent.png"
    pal = Image.new("P", (40, 40), 0)
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.paste(1, (10, 10, 30, 30))
    pal.save(good["palette_transparent.png"], transparency=0)
    good["animated.gif"] = d / "animated.gif"
    frames = [Image.new("RGB", (50, 50), c) for c in ("red", "green", "blue")]
    frames[0].save(good["animated.gif"], save_all=True, append_images=frames[1:], duration=100, loop=0)
    good["exif_rotated.jpg"] = d / "exif_rotated.jpg"
    exif_rotated_jpeg(good["exif_rotated.jpg"])
    good["1x1.png"] = d / "1x1.png"
    Image.new("RGB", (1, 1), "white").save(good["1x1.png"])
    good["20000x100.png"] = d / "20000x100.png"
    Image.new("RGB", (20000, 100), "gray").save(good["20000x100.png"])
    good["non_utf8"] = d / os.fsdecode(b"caf\xe9.jpg")
    write_photo(good["non_utf8"], 2)
    # --- bad files: each must be skipped with its reason
    bad["empty.jpg"] = (d / "empty.jpg", "empty file")
    bad["empty.jpg"][0].write_bytes(b"")
    data = (d / "normal.jpg").read_bytes()
    bad["truncated.jpg"] = (d / "truncated.jpg", "corrupt or truncated")
    bad["truncated.jpg"][0].write_bytes(data[: len(data) // 2])
    bad["text.jpg"] = (d / "text.jpg", "not an image")
    bad["text.jpg"][0].write_text("hello, I am a text file\n" * 20)
    bad["bomb.png"] = (d / "bomb.png", "decompression bomb")
    bad["bomb.png"][0].write_bytes(bomb_png(30000, 30000))
    bad["unreadable.jpg"] = (write_photo(d / "unreadable.jpg", 3), "permission denied")
    bad["pipe.jpg"] = (d / "pipe.jpg", "not a regular file")
    os.mkfifo(bad["pipe.jpg"][0])
    bad["self.jpg"] = (d / "self.jpg", "symbolic link loop")
    os.symlink("self.jpg", d / "self.jpg")
    (d / "sub").mkdir()
    bad["sub/loop"] = (d / "sub" / "loop", "symbolic link loop")
    os.symlink(d, d / "sub" / "loop")
    return d, good, bad


def test_bad_input_zoo(library, zoo, monkeypatch):
    folder, good, bad = zoo
    unreadable = str(bad["unreadable.jpg"][0])
    if os.geteuid() == 0:
        # root reads any file whatever its mode: fail the open the way it fails for a normal user.
        real_open = open

        def open_(path, *args, **kwargs):
            if str(path) == unreadable:
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(imgtxt.library.photo_work, "open", open_, raising=False)
    else:
        os.chmod(unreadable, 0)

    result = library.run("index", folder, "--json")
    summary = json.loads(result.stdout)
    reasons = {f["path"]: f["reason"] for f in summary["skipped_files"]}
    for name, (path, reason) in bad.items():
        assert reason in reasons.get(str(path), ""), (name, reasons)
        assert str(path) in result.stderr                                 # reported as it happened
    assert summary["skipped"] == len(bad)

    conn = sqlite3.connect(library.index / "index.db")
    rows = {p: (w, h) for p, w, h in conn.execute("SELECT path, width, height FROM photos")}
    from imgtxt.library.photo_paths import path_key

    assert set(rows) == {path_key(str(p)) for p in good.values()}
    assert summary["indexed"] == summary["added"] == len(good)
    assert rows[str(good["exif_rotated.jpg"])] == (60, 120)             # stored upright
    assert rows[str(good["20000x100.png"])] == (20000, 100)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    # A rerun retries nothing (bad files unchanged) and embeds nothing; skipped files stay reported.
    again = json.loads(library.run("index", folder, "--json", "-q").stdout)
    assert (again["embedded"], again["unchanged"], again["skipped"]) == (0, len(good), len(bad))
    listed = library.run("status", "--skipped").stdout
    assert all(str(path) in listed for path, _ in bad.values())

    # The non-UTF-8 photo is usable in queries.
    hits = [json.loads(line) for line in library.run("similar", good["non_utf8"], "--json").stdout.splitlines()]
    assert len(hits) == len(good) - 1


def test_a_fixed_file_leaves_the_skipped_list(library, tmp_path):
    bad = tmp_path / "p" / "later.jpg"
    bad.parent.mkdir()
    bad.write_bytes(b"")
    write_photo(tmp_path / "p" / "ok.jpg", 1)
    assert json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)["skipped"] == 1
    write_photo(bad, 2)
    s = json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)
    assert (s["skipped"], s["added"], s["indexed"]) == (0, 1, 2)
