"""Searching photos as people remember them, on real files: EXIF dates with offsets and GPS written by piexif,
folder names, a photo without EXIF dated by its mtime; the migration of an index of the previous schema."""
from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from conftest import copy_examples, write_photo

piexif = pytest.importorskip("piexif", reason="piexif writes the test photos' EXIF (the test extra)")

BERLIN, LISBON = (52.5200, 13.4050), (38.7223, -9.1393)


def dms(value: float):
    value = abs(value)
    d, rest = int(value), (abs(value) - int(value)) * 60
    return ((d, 1), (int(rest), 1), (int((rest - int(rest)) * 60 * 100), 100))


def exif_photo(path: Path, seed: int, taken: str | None = None, offset: str | None = None, gps=None) -> Path:
    """A JPEG with EXIF DateTimeOriginal ("2019:07:14 15:30:00"), OffsetTimeOriginal and GPS as a camera writes."""
    exif = {"0th": {}, "Exif": {}, "GPS": {}}
    if taken:
        exif["Exif"][piexif.ExifIFD.DateTimeOriginal] = taken.encode()
    if offset:
        exif["Exif"][piexif.ExifIFD.OffsetTimeOriginal] = offset.encode()
    if gps:
        lat, lon = gps
        exif["GPS"] = {piexif.GPSIFD.GPSLatitudeRef: b"N" if lat >= 0 else b"S", piexif.GPSIFD.GPSLatitude: dms(lat),
                       piexif.GPSIFD.GPSLongitudeRef: b"E" if lon >= 0 else b"W", piexif.GPSIFD.GPSLongitude: dms(lon)}
    return write_photo(path, seed, exif=piexif.dump(exif))


@pytest.fixture()
def album(tmp_path):
    root = tmp_path / "Pictures"
    photos = {
        "germany_summer": exif_photo(root / "2019 Germany trip" / "IMG_0001.jpg", 1, "2019:07:14 15:30:00", "+02:00",
                                     BERLIN),
        "germany_winter": exif_photo(root / "2019 Germany trip" / "IMG_0002.jpg", 2, "2019:12:24 18:00:00"),
        "lisbon": exif_photo(root / "Portugal" / "dinnerWithFriends.jpg", 3, "2021:03:02 20:15:00", "+00:00", LISBON),
        "old": write_photo(root / "misc" / "scan.jpg", 4),
        "beach": exif_photo(root / "misc" / "beach.jpg", 5, "2018:08:01 10:00:00"),
    }
    stamp = datetime(2015, 6, 1, 12, 0).timestamp()
    os.utime(photos["old"], (stamp, stamp))
    return root, photos


def paths(matches) -> set[str]:
    return {Path(m.path).name for m in matches}


def test_facts_come_from_exif_or_the_mtime_and_an_old_index_gains_them_without_reembedding(album, tmp_path,
                                                                                           tiny_model_dir, monkeypatch):
    from imgtxt import Library

    root, photos = album
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    assert lib.index([root]).embedded == 5
    db = tmp_path / "index" / "index.db"
    # The previous schema: what an index of the previous imgtxt holds, without the new tables.
    from imgtxt.library.migrations import SCHEMA_VERSION

    conn = sqlite3.connect(db)
    conn.executescript(f"DROP TABLE photo_facts; DROP TABLE photo_words; PRAGMA user_version={SCHEMA_VERSION - 1};")
    conn.close()
    with pytest.raises(Exception, match="older imgtxt"):
        lib.search("a dog")
    summary = lib.index([root])
    assert summary.embedded == 0 and summary.unchanged == 5                  # migrated, nothing re-embedded
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    facts = {Path(p).name: rest for p, *rest in conn.execute(
        "SELECT path, taken, taken_offset, taken_from, latitude, longitude, city, region, country FROM photo_facts")}
    assert facts["IMG_0001.jpg"][:3] == ["2019-07-14T15:30:00", "+02:00", "exif"]
    assert facts["IMG_0001.jpg"][3] == pytest.approx(BERLIN[0], abs=1e-3)
    assert facts["IMG_0001.jpg"][4] == pytest.approx(BERLIN[1], abs=1e-3)
    assert facts["IMG_0002.jpg"][:3] == ["2019-12-24T18:00:00", None, "exif"] and facts["IMG_0002.jpg"][3] is None
    assert facts["scan.jpg"][:3] == ["2015-06-01T12:00:00", None, "mtime"]
    assert facts["dinnerWithFriends.jpg"][7] == "Portugal"
    words = {w for (w,) in conn.execute("SELECT word FROM photo_words p JOIN photos USING (id) WHERE photos.path = ?",
                                        [str(photos["lisbon"])])}
    assert {"pictures", "portugal", "dinner", "with", "friends", "lisbon"} <= words   # folder, camelCase, place
    conn.close()
    # A rerun reads no header again (the facts are of the same file); a changed file is read again.
    import imgtxt.library.photo_facts as photo_facts

    read = []
    real_read = photo_facts.read_facts
    monkeypatch.setattr(photo_facts, "read_facts", lambda path, mtime_ns: read.append(path) or real_read(path, mtime_ns))
    lib.index([root])
    assert read == []
    exif_photo(photos["beach"], 5, "2017:08:01 10:00:00")
    lib.index([root])
    assert read == [str(photos["beach"])]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT taken FROM photo_facts f JOIN photos p USING (id) WHERE p.path = ?",
                        [str(photos["beach"])]).fetchone()[0] == "2017-08-01T10:00:00"
    conn.close()


def test_dates_in_options_and_in_the_query(album, tmp_path, tiny_model_dir):
    from imgtxt import ImgtxtError, Library

    root, _ = album
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    lib.index([root])
    assert paths(lib.search("a dog", after="2019-06", before="2019-09")) == {"IMG_0001.jpg"}
    assert paths(lib.search("a dog", after="2019")) == {"IMG_0001.jpg", "IMG_0002.jpg", "dinnerWithFriends.jpg"}
    assert paths(lib.search("a dog", before="2015-06-01")) == {"scan.jpg"}             # the mtime's day
    assert paths(lib.search("a dog", after="June 2019", before="2019-07-14")) == {"IMG_0001.jpg"}
    assert paths(lib.search("a dog 2019")) == {"IMG_0001.jpg", "IMG_0002.jpg"}
    assert lib.reading == "searching for: a dog · taken in 2019"
    assert paths(lib.search("snow in december")) == {"IMG_0002.jpg"}
    assert lib.reading == "searching for: snow · taken in December"
    assert paths(lib.search("a dog in summer")) == {"IMG_0001.jpg", "beach.jpg", "scan.jpg"}   # June, July, August
    assert paths(lib.search("a dog", n=10)) == paths(lib.search("a dog may run", n=10))   # "may" as a verb
    plain = lib.search("a dog")
    assert lib.reading is None and len(plain) == 5
    with pytest.raises(ImgtxtError, match="--after 'last tuesday': not a date"):
        lib.search("a dog", after="last tuesday")
    with pytest.raises(ImgtxtError, match="give the year"):
        lib.search("a dog", before="june")
    with pytest.raises(ImgtxtError, match="no photo can match"):
        lib.search("a dog", after="2020", before="2019")


def test_folder_words_blend_with_the_visual_score_and_in_restricts(album, tmp_path, tiny_model_dir):
    from imgtxt import Library

    root, _ = album
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    lib.index([root])
    ranked = lib.search("a dog germany", n=5)
    assert paths(ranked[:2]) == {"IMG_0001.jpg", "IMG_0002.jpg"} and len(ranked) == 5   # first, nothing excluded
    assert lib.reading is None                        # read as typed: the words only rank, no note
    assert paths(lib.search("germany")) == {"IMG_0001.jpg", "IMG_0002.jpg"}   # words only the folders know
    assert lib.reading == "searching for: germany · folder, file or place names with: germany"
    assert paths(lib.search("a dog", folder=root / "misc")) == {"scan.jpg", "beach.jpg"}
    assert paths(lib.search("a dog", folder=root / "misc" / "beach.jpg")) == {"beach.jpg"}
    assert lib.search("a dog", folder=root / "nowhere") == []


def test_places_from_gps(album, tmp_path, tiny_model_dir):
    pytest.importorskip("reverse_geocode", reason="place names need the places extra")
    from imgtxt import ImgtxtError, Library

    root, _ = album
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    lib.index([root])
    assert paths(lib.search("a dog", near="Lisbon")) == {"dinnerWithFriends.jpg"}
    assert paths(lib.search("a dog", near="berlin")) == {"IMG_0001.jpg"}
    assert paths(lib.search("a dog", near="Germany")) == {"IMG_0001.jpg"}           # IMG_0002 has no GPS
    assert lib.search("a dog", near="Tokyo") == []                                   # a real place, no photo there
    with pytest.raises(ImgtxtError, match="unknown place: 'Narnia'"):
        lib.search("a dog", near="Narnia")
    ranked = lib.search("a dog in lisbon", n=5)        # a place word ranks, never excludes photos without GPS
    assert Path(ranked[0].path).name == "dinnerWithFriends.jpg" and len(ranked) == 5


def test_like_a_photo_with_and_without_text(album, tmp_path, tiny_model_dir):
    from imgtxt import ImgtxtError, Library

    root, photos = album
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    lib.index([root])
    alike = lib.search("", like=photos["beach"], n=10)
    assert [m.path for m in alike] == [m.path for m in lib.similar(photos["beach"], n=10)]
    with_text = lib.search("snow", like=photos["beach"], n=10)
    assert "beach.jpg" not in paths(with_text) and len(with_text) == 4
    scores_like = {m.path: m.score for m in alike}
    scores_text = {m.path: m.score for m in lib.search("snow", n=10)}
    for m in with_text:   # half the photo's cosine, half the text's score
        assert m.score == pytest.approx(0.5 * scores_like[m.path] + 0.5 * scores_text[m.path], abs=1e-4)
    assert paths(lib.search("", like=photos["beach"], after="2019")) == {"IMG_0001.jpg", "IMG_0002.jpg",
                                                                        "dinnerWithFriends.jpg"}
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a photo")
    with pytest.raises(ImgtxtError, match="broken.jpg"):
        lib.search("", like=broken)
    with pytest.raises(ImgtxtError, match="no such file"):
        lib.search("", like=tmp_path / "missing.jpg")


def test_cli_notes_json_and_one_line_errors(album, library):
    root, photos = album
    library.run("index", root)
    result = library.run("search", "a", "dog", "2019", "--json")
    assert "imgtxt: searching for: a dog · taken in 2019" in result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {Path(r["path"]).name for r in rows} == {"IMG_0001.jpg", "IMG_0002.jpg"}
    assert set(rows[0]) >= {"rank", "score", "path"}
    result = library.run("search", "--after", "2019-06", "--before", "2019-09", "-0")
    assert result.stdout_bytes == os.fsencode(str(photos["germany_summer"])) + b"\0"
    result = library.run("search", "--like", photos["beach"], "snow", "--in", root / "misc")
    assert [line.split("\t")[2] for line in result.stdout.splitlines()] == [str(photos["old"])]
    for args, message in ((["dog", "--after", "soon"], "--after 'soon': not a date"),
                          (["dog", "--near", "Narnia"], "unknown place"),
                          (["--like", root / "none.jpg"], "no such file"),
                          ([], "give what the photo shows")):
        result = library.run("search", *args, ok=False)
        assert result.exit_code == 1 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_duplicates_groups_exact_copies_and_resized_or_reencoded_ones(tmp_path, library):
    import shutil

    from PIL import Image

    from imgtxt import Library

    root = tmp_path / "dups"
    photos = {p.stem: p for p in copy_examples(root / "trip")}   # real photos: the tiny model tells them apart
    first = photos["coffee"]
    with Image.open(first) as image:
        image.resize((image.width * 2 // 3, image.height * 2 // 3)).save(root / "trip" / "coffee_small.jpg",
                                                                        quality=70)   # resized, re-encoded
        image.save(root / "trip" / "coffee_q40.jpg", quality=40)                        # re-encoded
        small_size = (image.width * 2 // 3, image.height * 2 // 3)
    (root / "backup").mkdir()
    shutil.copy2(first, root / "backup" / "coffee.jpg")
    exact = write_photo(root / "others" / "dup_a.png", 30)
    shutil.copy2(exact, root / "others" / "dup_b.png")
    lib = Library(library.index, model=library.model)
    lib.index([root])
    before = sorted(p.name for p in root.rglob("*"))
    groups = lib.duplicates(0.85)   # the tiny model's copies: 0.93-0.96; its distinct photos: at most 0.78
    assert [(g.kind, sorted(Path(p.path).name for p in g.photos)) for g in groups] == [
        ("near", ["coffee.jpg", "coffee.jpg", "coffee_q40.jpg", "coffee_small.jpg"]),
        ("exact", ["dup_a.png", "dup_b.png"])]
    small = next(p for p in groups[0].photos if p.path.endswith("small.jpg"))
    assert (small.width, small.height) == small_size
    assert small.size == (root / "trip" / "coffee_small.jpg").stat().st_size
    assert small.taken and small.taken_from == "mtime"
    assert 0.85 <= groups[0].similarity < 1.0 and groups[1].similarity == 1.0
    assert [g.kind for g in lib.duplicates(1.0)] == ["exact", "exact"]        # only identical files
    result = library.run("duplicates", "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows and rows[0]["group"] == 1 and set(rows[0]["photos"][0]) >= {"path", "size", "width", "height", "taken"}
    assert "nothing was changed" in result.stderr
    result = library.run("duplicates", "--threshold", "1")
    assert [line.split("\t")[:2] for line in result.stdout.splitlines()] == [["1", "exact"]] * 2 + [["2", "exact"]] * 2
    assert result.stdout.splitlines()[0].split("\t")[-1] == str(root / "backup" / "coffee.jpg")
    assert sorted(p.name for p in root.rglob("*")) == before                    # never deletes or moves
    assert library.run("duplicates", "--threshold", "0", ok=False).exit_code == 2


def test_confidence_comes_from_the_model_score_without_the_folder_bonus():
    from types import SimpleNamespace

    from imgtxt.library.remembered_search import Ranker
    from imgtxt.library.results import PhotoMatch

    calibration = SimpleNamespace(confidence=lambda score: score, level=lambda c: "strong" if c >= 0.5 else "weak")
    model = SimpleNamespace(calibration=calibration)
    matches = [PhotoMatch(1, 0.7, "/a/germany/1.jpg", 1), PhotoMatch(2, 0.6, "/a/2.jpg", 2)]
    rated = Ranker(None, bonus={1: 0.25}).rate(model, matches)
    assert [(m.score, m.confidence, m.level) for m in rated] == [(0.7, pytest.approx(0.45), "weak"),
                                                                 (0.6, 0.6, "strong")]
    assert Ranker(None, visual=False).rate(model, matches)[0].level == "weak"   # left as it was: not rated again


@pytest.mark.parametrize("name, words", [
    ("2019 Germany trip", ["germany", "trip"]), ("dinnerWithFriends", ["dinner", "with", "friends"]),
    ("IMG_0412", ["img"]), ("trip2019germany", ["trip", "germany"]), ("São Paulo", ["sao", "paulo"]),
    ("HTMLParser2", ["html", "parser"]),
    ("1000268201_693b08cb0e", []), ("a5bed3f", []),   # hashes: their letters ("bed") are no words
])
def test_name_words(name, words):
    from imgtxt.library.name_words import words_of

    assert words_of(name) == words


def test_query_dates_are_read_only_where_they_stand_as_dates():
    from imgtxt.library.query_filters import Filters, read_query

    cases = {"beach 2019": ("beach", {2019}, set()), "snow in december": ("snow", set(), {12}),
             "a dog may run": ("a dog may run", set(), set()), "flowers in may": ("flowers", set(), {5}),
             "a protest march": ("a protest march", set(), set()), "march 2020 parade": ("parade", {2020}, {3}),
             "winter 2018": ("", {2018}, {12, 1, 2}), "a 2 dogs": ("a 2 dogs", set(), set()),
             "a fall from a bike": ("a fall from a bike", set(), set())}
    for text, (left, years, months) in cases.items():
        filters = Filters()
        assert (read_query(text, filters), filters.years, filters.months) == (left, years, months), text


def test_without_the_places_extra_positions_are_kept_and_named_later(album, tmp_path, tiny_model_dir, monkeypatch):
    pytest.importorskip("reverse_geocode", reason="naming them later needs the places extra")
    import sys

    from imgtxt import ImgtxtError, Library

    root, _ = album
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    monkeypatch.setitem(sys.modules, "reverse_geocode", None)   # not installed: `import` raises ImportError
    notices = []
    lib.index([root], notice=notices.append)
    assert any("stored unnamed" in n and "places" in n for n in notices)
    with pytest.raises(ImgtxtError, match="unknown place: 'Lisbon'.*places"):
        lib.search("a dog", near="Lisbon")
    monkeypatch.delitem(sys.modules, "reverse_geocode")
    lib.index([root])                                            # the extra is there now: named, nothing re-read
    assert paths(lib.search("a dog", near="Lisbon")) == {"dinnerWithFriends.jpg"}
