"""What a new user meets in the first hour: forget that sticks, similar without the photo's own copies, errors
that name the file, --preview saying why it shows no pictures, status --json's help."""
from __future__ import annotations

import json
import shutil

from conftest import copy_examples, write_photo


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_forget_keeps_a_folder_out_until_it_is_indexed_by_name(library, tmp_path):
    copy_examples(tmp_path / "photos" / "keep", ["cat", "coffee"])
    copy_examples(tmp_path / "photos" / "old", ["rocket", "cameraman"])
    copy_examples(tmp_path / "photos" / "old" / "inner", ["astronaut"])
    library.run("index", tmp_path / "photos", "-q")
    said = library.run("forget", tmp_path / "photos" / "old").stdout
    assert "forgot 3 photos" in said and "leaves it out until you index" in said
    status = json.loads(library.run("status", "--json").stdout)
    assert status["photos"] == 2 and status["forgotten"] == [str(tmp_path / "photos" / "old")]
    assert "forgotten (left out of `imgtxt index`" in library.run("status").stdout

    again = library.run("index", tmp_path / "photos", "--json")                # the parent folder: still out
    assert json.loads(again.stdout)["indexed"] == 2
    assert "left out" in again.stderr and str(tmp_path / "photos" / "old") in again.stderr
    assert json.loads(library.run("status", "--json").stdout)["forgotten"] == [str(tmp_path / "photos" / "old")]

    inner = library.run("index", tmp_path / "photos" / "old" / "inner", "--json", "-q")   # a path inside: back
    assert json.loads(inner.stdout)["indexed"] == 3
    assert json.loads(library.run("status", "--json").stdout)["forgotten"] == []
    assert json.loads(library.run("index", tmp_path / "photos", "--json", "-q").stdout)["indexed"] == 5


def test_forgetting_a_photo_keeps_it_out_too(library, tmp_path):
    photos = copy_examples(tmp_path / "p", ["cat", "coffee"])
    library.run("index", tmp_path / "p", "-q")
    library.run("forget", photos[0])
    assert json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)["indexed"] == 1
    assert json.loads(library.run("index", photos[0], "--json", "-q").stdout)["indexed"] == 2


def test_similar_leaves_out_the_photo_and_its_byte_identical_copies(library, tmp_path):
    photos = copy_examples(tmp_path / "p", ["cat", "coffee", "rocket", "cameraman"])
    shutil.copy2(photos[0], tmp_path / "p" / "cat-copy.jpg")
    outside = shutil.copy2(photos[0], tmp_path / "not-indexed-cat.jpg")
    library.run("index", tmp_path / "p", "-q")
    for asked in (photos[0], tmp_path / "p" / "cat-copy.jpg", outside):
        hits = json_lines(library.run("similar", asked, "--json", "--all-copies").stdout)
        paths = [h["path"] for h in hits]
        assert str(photos[0]) not in paths and str(tmp_path / "p" / "cat-copy.jpg") not in paths, asked
        assert len(hits) == 3 and all(h["score"] < 0.999 for h in hits)


def test_caption_and_similar_of_a_broken_file_name_the_file(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat", "coffee"])
    library.run("index", tmp_path / "p", "-q")
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 this is not a jpeg")
    for command in ("caption", "similar"):
        result = library.run(command, broken, ok=False)
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert result.stderr.strip() == f"imgtxt: {broken}: not an image Pillow can read", result.stderr


def test_preview_says_in_one_line_why_it_shows_no_pictures(library, tmp_path, monkeypatch):
    import imgtxt.cli.preview

    copy_examples(tmp_path / "p", ["cat"])
    library.run("index", tmp_path / "p", "-q")
    piped = library.run("search", "a cat", "--preview")
    assert piped.stderr.strip() == "imgtxt: --preview shows no pictures: the output is not a terminal"
    monkeypatch.setattr(imgtxt.cli.preview.sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(imgtxt.cli.preview, "no_pictures_reason", lambda: "this terminal cannot draw images "
                        "(kitty, iTerm2, WezTerm or a sixel terminal can)")
    monkeypatch.setattr(imgtxt.cli.preview, "image_class", lambda: None)
    plain = library.run("search", "a cat", "--preview")
    assert "shows no pictures: this terminal cannot draw images" in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1


def test_status_json_help_says_it_prints_one_object(library):
    text = library.run("status", "--help").stdout
    assert "one JSON object" in text and "per line on stdout" not in text.split("--skipped")[0].split("--json")[1]


def test_heic_without_pillow_heif_is_a_skipped_file_with_its_install(library, tmp_path, monkeypatch):
    import imgtxt.library.scan

    monkeypatch.setattr(imgtxt.library.scan, "heif_available", lambda: False)
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    (tmp_path / "p" / "IMG_0001.HEIC").write_bytes(b"not decoded here")
    summary = json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)
    assert summary["indexed"] == 1
    assert summary["skipped_files"] == [{"path": str(tmp_path / "p" / "IMG_0001.HEIC"), "reason":
                                         "HEIC/HEIF photo (needs pillow-heif: pip install '.[heif]' in the imgtxt "
                                         "checkout)"}]
    skipped = library.run("status", "--skipped").stdout
    assert "IMG_0001.HEIC\tHEIC/HEIF photo (needs pillow-heif" in skipped

