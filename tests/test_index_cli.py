"""`imgtxt index/search/caption/similar/status` end to end on real files, with the tiny real model."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO, copy_examples, write_photo

from imgtxt.library.store import decode_vectors


def summary_of(result) -> dict:
    return json.loads(result.stdout)


def db_rows(lib) -> dict:
    conn = sqlite3.connect(lib.index / "index.db")
    rows = {r[0]: r[1:] for r in conn.execute("SELECT path, id, hash, embedding, model_id, width, height FROM photos")}
    conn.close()
    return rows


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


# ------------------------------------------------------------------------------------------- end to end

def test_index_then_search_caption_similar_status(library, tmp_path):
    photos = copy_examples(tmp_path / "photos")
    result = library.run("index", tmp_path / "photos", "--json")
    s = summary_of(result)
    assert (s["added"], s["embedded"], s["indexed"], s["skipped"]) == (6, 6, 6, 0)
    assert result.stderr == ""                      # no progress bar when stderr is not a terminal

    hits = json_lines(library.run("search", "a cat sitting on a table", "-n", "4", "--json").stdout)
    assert [h["rank"] for h in hits] == [1, 2, 3, 4]
    assert all(set(h) == {"rank", "score", "path"} for h in hits)
    assert {h["path"] for h in hits} <= {str(p) for p in photos}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    # Piped (not a terminal): one tab-separated line per result, nothing else on stdout.
    tsv = library.run("search", "a rocket in the sky", "-n", "3").stdout.splitlines()
    assert len(tsv) == 3 and all(len(line.split("\t")) == 3 for line in tsv)

    caps = json_lines(library.run("caption", photos[0], "-n", "3", "--json").stdout)
    assert len(caps) == 3 and all(set(c) == {"rank", "score", "caption"} for c in caps)

    sims = json_lines(library.run("similar", photos[0], "-n", "10", "--json").stdout)
    assert len(sims) == 5 and str(photos[0]) not in {h["path"] for h in sims}  # itself left out
    outside = write_photo(tmp_path / "elsewhere" / "new.jpg", seed=3)           # not indexed: the CNN embeds it
    assert len(json_lines(library.run("similar", outside, "--json").stdout)) == 6

    status = json.loads(library.run("status", "--json").stdout)
    assert status["photos"] == 6 and status["skipped"] == 0 and status["model"].startswith("tiny-")
    assert status["db"] == str((library.index / "index.db").resolve()) and status["last_run"]


def test_search_scores_match_a_brute_force_ranking(library, tmp_path, tiny_model):
    for i in range(12):
        write_photo(tmp_path / "p" / f"{i:02}.jpg", seed=i)
    library.run("index", tmp_path / "p", "--quiet")
    query = "two dogs running in the grass"
    hits = json_lines(library.run("search", query, "-n", "12", "--json").stdout)
    rows = db_rows(library)
    paths = sorted(rows)
    images = decode_vectors([rows[p][2] for p in paths], tiny_model.config["joint"]["embed_dim"])
    scores = tiny_model.scores(images, tiny_model.encode_text([query]))[:, 0]
    expected = [paths[i] for i in np.argsort(-scores)]
    assert [h["path"] for h in hits] == expected
    assert np.allclose([h["score"] for h in hits], np.sort(scores)[::-1], atol=1e-3)
    # --min-score leaves out the weaker matches
    cut = float(np.median(scores))
    kept = json_lines(library.run("search", query, "-n", "12", "--min-score", cut, "--json").stdout)
    assert len(kept) == int((scores >= cut).sum()) or len(kept) == int((scores > cut).sum())


def test_caption_with_own_caption_file_and_its_cache(library, tmp_path, tiny_model, tiny_model_dir):
    photo = copy_examples(tmp_path / "p", ["coffee"])[0]   # no index at all: caption runs the CNN
    captions = tmp_path / "mine.txt"
    captions.write_text("a cup of coffee\n\na rocket\na cat\n", encoding="utf-8")
    args = ("caption", photo, "--captions", captions, "--json", "--model", tiny_model_dir)
    first = json_lines(library.run(*args).stdout)
    assert sorted(c["caption"] for c in first) == ["a cat", "a cup of coffee", "a rocket"]
    cached = list((library.index.parent / "cache" / "captions").glob(f"{tiny_model.model_id}-*.npy"))
    assert len(cached) == 1
    again = json_lines(library.run(*args).stdout)
    assert again == first


# ------------------------------------------------------------------------------------------- incremental

def test_incremental_add_modify_delete_rename(library, tmp_path):
    folder = tmp_path / "p"
    for i in range(5):
        write_photo(folder / f"{i}.jpg", seed=i)
    assert summary_of(library.run("index", folder, "--json", "-q"))["added"] == 5

    vector_files = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in library.index.glob("vectors-*")}
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["unchanged"], s["added"], s["embedded"]) == (5, 0, 0)
    assert s["vector_index"] == "vector index: unchanged"          # a no-change rerun rewrites no vector file
    assert vector_files and {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in library.index.glob("vectors-*")} \
        == vector_files

    before = db_rows(library)
    write_photo(folder / "new.jpg", seed=10)                                  # add
    write_photo(folder / "1.jpg", seed=11)                                    # modify
    os.utime(folder / "1.jpg", ns=(1, 1))
    (folder / "2.jpg").unlink()                                               # delete
    (folder / "sub").mkdir()
    os.rename(folder / "3.jpg", folder / "sub" / "renamed.jpg")               # move + rename
    os.utime(folder / "0.jpg")                                                # touched, same bytes

    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert {k: s[k] for k in ("added", "updated", "moved", "removed", "unchanged", "skipped")} == \
        {"added": 1, "updated": 1, "moved": 1, "removed": 1, "unchanged": 2, "skipped": 0}
    assert s["embedded"] == 2                       # only the new and the modified photo met the CNN
    after = db_rows(library)
    assert sorted(after) == sorted(str(folder / n) for n in ["0.jpg", "1.jpg", "4.jpg", "new.jpg", "sub/renamed.jpg"])
    renamed = after[str(folder / "sub" / "renamed.jpg")]
    old = before[str(folder / "3.jpg")]
    assert renamed[0] == old[0] and renamed[2] == old[2]   # same row id, same vector: not re-embedded
    assert after[str(folder / "1.jpg")][1] != before[str(folder / "1.jpg")][1]

    hits = json_lines(library.run("search", "a dog", "-n", "10", "--json").stdout)
    assert sorted(h["path"] for h in hits) == sorted(after)      # search files in step: no stale paths

    shutil.copy2(folder / "4.jpg", folder / "copy.jpg")           # a copy reuses the vector too
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["added"], s["embedded"]) == (1, 0)


def test_indexing_a_second_folder_keeps_the_first(library, tmp_path):
    write_photo(tmp_path / "a" / "1.jpg", seed=1)
    write_photo(tmp_path / "b" / "2.jpg", seed=2)
    library.run("index", tmp_path / "a", "-q")
    s = summary_of(library.run("index", tmp_path / "b", "--json", "-q"))
    assert (s["added"], s["removed"], s["indexed"]) == (1, 0, 2)


def test_exclude_option(library, tmp_path):
    write_photo(tmp_path / "p" / "keep.jpg", seed=1)
    write_photo(tmp_path / "p" / "drafts" / "no.jpg", seed=2)
    s = summary_of(library.run("index", tmp_path / "p", "--exclude", "drafts", "--json", "-q"))
    assert s["indexed"] == 1


def test_model_change_is_announced_and_everything_is_re_embedded(library, tmp_path, facts, tiny_model_dir):
    from tiny_model import build_tiny_model

    for i in range(3):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)
    library.run("index", tmp_path / "p", "-q")
    other = build_tiny_model(tmp_path / "other-model", facts, seed=1, name="other")
    result = library.run("index", tmp_path / "p", "--json", "--model", other)
    s = summary_of(result)
    assert "another model" in result.stderr and (s["updated"], s["embedded"], s["indexed"]) == (3, 3, 3)
    assert all(row[3].startswith("other-") for row in db_rows(library).values())
    # Searching with the old model must not mix models: a clear error instead.
    result = library.run("search", "a dog", "--model", tiny_model_dir, ok=False)
    assert result.exit_code != 0 and "was built with model other-" in result.stderr
    # ... which says what to run: `imgtxt index` with the index's own folders (after an upgrade of the shipped
    # model a user need not remember them)
    assert f"run `imgtxt index {tmp_path / 'p'}` with this model" in result.stderr   # the default index: no --index
    # Without --model, queries use the model the index was built with.
    assert len(json_lines(library.run("search", "a dog", "--json").stdout)) == 3


def test_the_re_embed_hint_quotes_the_index_folders_and_names_a_non_default_index(tmp_path, monkeypatch):
    from imgtxt.library.query import Index

    monkeypatch.setenv("IMGTXT_INDEX_DIR", str(tmp_path / "default-index"))
    index = Index.__new__(Index)   # the hint reads the index's meta and folder alone
    index.dir = tmp_path / "elsewhere"
    index.meta = {"folders": json.dumps(["/photos/a b", "/p2", "/p3", "/p4"])}
    assert index.reindex_command() == f"imgtxt index '/photos/a b' /p2 /p3 ... --index {tmp_path / 'elsewhere'}"
    index.dir, index.meta = tmp_path / "default-index", {}
    assert index.reindex_command() == "imgtxt index FOLDER"


# ------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("args, message", [
    (["search", "a dog"], "no index at"),
    (["status"], "no index at"),
    (["similar", "x.jpg"], "no index at"),
])
def test_missing_index(library, args, message):
    result = library.run(*args, ok=False)
    assert result.exit_code == 1 and message in result.stderr and result.stdout == ""


def test_query_errors_are_one_line_reasons(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat", "rocket"])
    library.run("index", tmp_path / "p", "-q")
    cases = [
        (["search", ""], "empty query"),
        (["search", "   ...  "], "none of the words"),
        (["search", "qwzx blorf"], "none of the words"),
        (["caption", tmp_path / "nope.jpg"], "no such file"),
        (["similar", tmp_path / "nope.jpg"], "no such file"),
        (["caption", tmp_path / "p"], "is a folder"),
        (["caption", tmp_path / "p" / "cat.jpg", "--captions", tmp_path / "none.txt"], "cannot read captions"),
    ]
    (tmp_path / "p" / "bad.jpg").write_text("not a photo")
    cases.append((["caption", tmp_path / "p" / "bad.jpg"], "not an image"))
    cases.append((["search", "a cat", "--model", tmp_path / "p"], "unusable model"))      # no model.json
    cases.append((["search", "a cat", "--model", tmp_path / "gone"], "unusable model"))
    for args, message in cases:
        result = library.run(*args, ok=False)
        assert result.exit_code == 1, args
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        assert result.stdout == ""


def test_folder_without_photos_and_missing_folder(library, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("hi")
    result = library.run("index", tmp_path / "docs", ok=False)
    assert result.exit_code == 1 and "no photos under" in result.stderr
    result = library.run("index", tmp_path / "nowhere", ok=False)
    assert result.exit_code == 1 and "no such folder" in result.stderr


def test_index_from_a_newer_version_is_refused(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat"])
    library.run("index", tmp_path / "p", "-q")
    conn = sqlite3.connect(library.index / "index.db")
    conn.execute("PRAGMA user_version=99")
    conn.commit()
    conn.close()
    for args in (["search", "a cat"], ["status"], ["index", tmp_path / "p"]):
        result = library.run(*args, ok=False)
        assert result.exit_code == 1 and "newer imgtxt" in result.stderr


def test_empty_index_says_so(library, tmp_path):
    write_photo(tmp_path / "p" / "a.jpg", seed=1)
    library.run("index", tmp_path / "p", "-q")
    (tmp_path / "p" / "a.jpg").unlink()
    (tmp_path / "p" / "b.jpg").write_bytes(b"")  # the folder still has a "photo", a bad one
    s = summary_of(library.run("index", tmp_path / "p", "--json", "-q"))
    assert (s["removed"], s["indexed"], s["skipped"]) == (1, 0, 1)
    result = library.run("search", "a dog", ok=False)
    assert result.exit_code == 1 and "empty" in result.stderr


# ------------------------------------------------------------------------------------------- fast start

def test_query_commands_never_import_torch(library, tmp_path):
    """search, status and similar/caption of an indexed photo run without torch, timm or nltk's __init__."""
    photos = copy_examples(tmp_path / "p", ["cat", "coffee", "rocket"])
    library.run("index", tmp_path / "p", "-q")
    script = textwrap.dedent(f"""
        import sys
        from click.testing import CliRunner
        from imgtxt.cli.main import app
        runner = CliRunner()
        for args in (["search", "a cat on a table"], ["status", "--json"], ["similar", {str(photos[0])!r}],
                     ["caption", {str(photos[1])!r}]):
            result = runner.invoke(app, args)
            assert result.exit_code == 0, (args, result.output)
        heavy = sorted(m for m in ("torch", "timm", "torchvision", "scipy", "sqlite_utils", "nltk") if m in sys.modules)
        print(" ".join(heavy) or "none")
    """)
    import subprocess

    out = subprocess.run([sys.executable, "-c", script], env=library.env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


def test_search_subprocess_on_examples(library, tmp_path):
    """The installed console script, as a user runs it."""
    copy_examples(tmp_path / "p")
    library.run("index", tmp_path / "p", "-q")
    out = library.subprocess("search", "an astronaut", "-n", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert len(json_lines(out.stdout)) == 2 and out.stderr == ""
    out = library.subprocess("search", "an astronaut", "--index", tmp_path / "elsewhere")
    assert out.returncode == 1 and out.stderr.startswith("imgtxt: no index at") and out.stdout == ""


def test_caption_vectors_are_the_encoder_output_in_input_order(tiny_model, tmp_path, monkeypatch):
    """The bank is encoded sorted by length (less padding) and cached; neither may change a vector."""
    from imgtxt.library.query import caption_vectors

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path))
    captions = ["a dog running on the beach in the snow with a red ball .", "a cat", "the man .", "a cup of coffee"]
    computed = []
    first = caption_vectors(tiny_model, captions, on_compute=computed.append)
    second = caption_vectors(tiny_model, captions, on_compute=computed.append)
    assert computed == [4]                                   # computed once, then read from the cache
    np.testing.assert_allclose(first, tiny_model.encode_text(captions), atol=1e-6)
    assert np.array_equal(first, second)


def test_heic_photos_are_indexed_with_the_heif_extra(library, tmp_path):
    pillow_heif = pytest.importorskip("pillow_heif", reason="the optional heif extra is not installed")
    from PIL import Image

    pillow_heif.register_heif_opener()
    folder = tmp_path / "phone"
    folder.mkdir()
    pixels = np.random.default_rng(1).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "IMG_0001.HEIC")
    s = summary_of(library.run("index", folder, "--json"))
    assert (s["added"], s["embedded"], s["skipped"]) == (1, 1, 0)
    hits = json_lines(library.run("similar", folder / "IMG_0001.HEIC", "--json").stdout)
    assert hits == []                                # the only indexed photo is itself, left out
