"""Camera files decoded from their embedded previews: MPF large thumbnails, EXIF thumbnails, camera RAW's JPEG,
and the draft (DCT-scaled) decode of every JPEG variant Pillow reports."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from camera_files import write_dng, write_exif_thumbnail_jpeg, write_mpf_jpeg
from PIL import Image

from imgtxt.library.photo_work import Work, decode
from imgtxt.model.images import ImageError, load_rgb

SIZE = 224   # the CNN's input side


def picture(size=(4000, 3000), seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)


def square(path, previews=True):
    result = decode(Work(str(path), 0, 0, None), SIZE, previews)
    assert not isinstance(result, Exception), result
    return result


def mpf_frame_bytes(path, frame: int) -> bytes:
    """The bytes of an MPO's frame, as its own JPEG file (MPF offsets are from the MP header)."""
    with Image.open(path) as im:
        entry = im.mpinfo[0xB002][frame]
        start = im._MpoImageFile__mpoffsets[frame]   # Pillow's resolved absolute offset
        return path.read_bytes()[start:start + entry["Size"]]


def test_mpf_preview_is_decoded_instead_of_the_main_picture(tmp_path):
    main = picture()
    path = write_mpf_jpeg(tmp_path / "IMG_0001.jpg", main, main.resize((1616, 1212), Image.LANCZOS))
    alone = tmp_path / "preview.jpg"
    alone.write_bytes(mpf_frame_bytes(path, 1))
    assert Image.open(alone).size == (1616, 1212)
    from_file, width, height = square(path)
    np.testing.assert_array_equal(from_file, square(alone, previews=False)[0])
    assert (width, height) == (4000, 3000)   # the photo's size, not the preview's
    # without --previews the main picture is decoded: different pixels (another JPEG, another scale)
    assert not np.array_equal(from_file, square(path, previews=False)[0])


def test_rotated_file_turns_its_preview_like_the_main_picture(tmp_path):
    main = picture()
    preview = main.resize((1616, 1212), Image.LANCZOS)
    # the preview's own EXIF says "upright" (1): the main picture's orientation (6) must still turn it
    path = write_mpf_jpeg(tmp_path / "portrait.jpg", main, preview, orientation=6, preview_orientation=1)
    alone = tmp_path / "preview.jpg"
    alone.write_bytes(mpf_frame_bytes(path, 1))
    image = load_rgb(path, SIZE, previews=True)
    assert image.height > image.width                       # upright, as the main picture is shown
    assert load_rgb(path, SIZE).height > load_rgb(path, SIZE).width
    expected = load_rgb(alone, SIZE).transpose(Image.Transpose.ROTATE_270)
    np.testing.assert_array_equal(np.asarray(image), np.asarray(expected))
    assert square(path)[1:] == (3000, 4000)


def test_preview_under_the_cnn_size_is_ignored(tmp_path):
    main = picture()
    path = write_mpf_jpeg(tmp_path / "small-preview.jpg", main, main.resize((320, 240)))
    np.testing.assert_array_equal(square(path)[0], square(path, previews=False)[0])   # 240 px < 256
    assert load_rgb(path, 200, previews=True).size == (500, 375)   # even for a smaller CNN input
    path = write_mpf_jpeg(tmp_path / "preview-256.jpg", main, main.resize((344, 258)))
    assert load_rgb(path, SIZE, previews=True).size == (344, 258)


def test_mpf_image_that_is_not_a_thumbnail_is_ignored(tmp_path):
    """Android Ultra HDR JPEGs carry their gain map as an "Undefined" MPF image: not the photo."""
    main = picture()
    gain_map = Image.new("RGB", (2000, 1500), (128, 128, 128))
    path = write_mpf_jpeg(tmp_path / "ultrahdr.jpg", main, gain_map, mptype=0)
    np.testing.assert_array_equal(square(path)[0], square(path, previews=False)[0])


def test_mpo_main_picture_is_draft_decoded(tmp_path):
    """A JPEG with an MPF second picture opens as "MPO": it must get the DCT-scaled decode too."""
    main = picture()
    path = write_mpf_jpeg(tmp_path / "camera.jpg", main, main.resize((320, 240)))
    assert Image.open(path).format == "MPO"
    assert load_rgb(path, 256).size == (500, 375)   # 1/8 scale, not the 4000x3000 picture


def test_exif_thumbnail_used_only_when_large_enough(tmp_path):
    main = picture()
    big = write_exif_thumbnail_jpeg(tmp_path / "big.jpg", main, main.resize((400, 300)), orientation=8)
    assert load_rgb(big, SIZE, previews=True).size == (300, 400)   # the thumbnail, turned by the main EXIF
    assert load_rgb(big, SIZE).size == (375, 500)
    small = write_exif_thumbnail_jpeg(tmp_path / "small.jpg", main, main.resize((160, 120)))
    assert load_rgb(small, SIZE, previews=True).size == (500, 375)


def test_raw_file_is_decoded_from_its_embedded_jpeg(tmp_path):
    pytest.importorskip("rawpy", reason="rawpy is the raw extra (in the test extra)")
    preview = picture((1600, 1200))
    path = write_dng(tmp_path / "IMG_0001.DNG", preview, orientation=6)
    jpeg = tmp_path / "preview.jpg"
    preview.save(jpeg, quality=90)
    image = load_rgb(path, SIZE)
    np.testing.assert_array_equal(np.asarray(image),
                                  np.asarray(load_rgb(jpeg, SIZE).transpose(Image.Transpose.ROTATE_270)))
    assert square(path, previews=False)[1:] == (48, 64)   # the sensor picture's size, turned upright


def test_raw_file_without_a_preview_gets_a_reason(tmp_path):
    pytest.importorskip("rawpy", reason="rawpy is the raw extra (in the test extra)")
    path = tmp_path / "broken.nef"
    path.write_bytes(b"not a raw file" * 100)
    with pytest.raises(ImageError, match="LibRaw"):
        load_rgb(path, SIZE)


@pytest.fixture()
def without_rawpy(monkeypatch):
    monkeypatch.setitem(sys.modules, "rawpy", None)   # import rawpy raises ImportError
    monkeypatch.setattr("imgtxt.model.previews.raw_available", lambda: False)
    monkeypatch.setattr("imgtxt.library.scan.raw_available", lambda: False)


# the install that adds rawpy, worded for a checkout and for an installed wheel (imgtxt is on no package index)
RAW_HINTS = {"checkout": "camera RAW photo (needs rawpy: pip install '.[raw]' in the imgtxt checkout)",
             "wheel": "camera RAW photo (needs rawpy: pip install 'rawpy>=0.19')"}


@pytest.mark.parametrize("installed", ["checkout", "wheel"])
def test_raw_without_the_extra_is_skipped_with_the_install_hint(tmp_path, without_rawpy, library, installed, request):
    from conftest import write_photo

    if installed == "wheel":
        request.getfixturevalue("as_wheel")
    hint = RAW_HINTS[installed]
    folder = tmp_path / "photos"
    write_photo(folder / "a.jpg", 1)
    write_dng(folder / "b.dng", picture((640, 480)))
    (folder / "c.CR2").write_bytes(b"raw")
    with pytest.raises(ImageError) as refused:
        load_rgb(folder / "b.dng", SIZE)
    assert str(refused.value) == hint
    out = json.loads(library.run("index", folder, "--json", "-q").stdout)
    assert out["added"] == 1
    assert out["device"].startswith("the CPU (")   # where the CNN ran (no GPU here)
    assert {f["path"].rsplit("/", 1)[1]: f["reason"] for f in out["skipped_files"]} == {"b.dng": hint, "c.CR2": hint}
    # a folder holding only RAW files lists them too, instead of "no photos"
    only_raw = tmp_path / "raw-only"
    only_raw.mkdir()
    write_dng(only_raw / "d.dng", picture((640, 480)))
    out = json.loads(library.run("index", only_raw, "--json", "-q").stdout)
    assert [f["reason"] for f in out["skipped_files"]] == [hint]


def test_index_with_previews_stores_the_previews_vector(tmp_path, library):
    import sqlite3

    folder = tmp_path / "photos"
    folder.mkdir()
    main = picture()
    path = write_mpf_jpeg(folder / "camera.jpg", main, main.resize((1616, 1212), Image.LANCZOS))
    alone = folder / "preview.jpg"
    alone.write_bytes(mpf_frame_bytes(path, 1))
    library.run("index", folder, "--previews", "-q")
    rows = dict(sqlite3.connect(library.index / "index.db").execute("SELECT path, embedding FROM photos"))
    assert rows[str(path)] == rows[str(alone)]
    library.run("index", folder, "--rebuild", "-q")   # without --previews: the main picture's vector
    rows = dict(sqlite3.connect(library.index / "index.db").execute("SELECT path, embedding FROM photos"))
    assert rows[str(path)] != rows[str(alone)]


def test_heic_thumbnail_item_used_only_when_large_enough(tmp_path):
    pillow_heif = pytest.importorskip("pillow_heif", reason="pillow-heif is the heif extra (in the test extra)")
    pillow_heif.register_heif_opener()
    path = tmp_path / "IMG_0001.HEIC"
    picture((1600, 1200)).save(path, quality=80, thumbnails=[400, 200])   # 400x300 and 200x150 thumbnail items
    assert load_rgb(path, SIZE, previews=True).size == (400, 300)
    assert load_rgb(path, SIZE).size == (1600, 1200)
    small = tmp_path / "small.heic"
    picture((1600, 1200)).save(small, quality=80, thumbnails=[320])      # 320x240: under 256 px
    assert load_rgb(small, SIZE, previews=True).size == (1600, 1200)
