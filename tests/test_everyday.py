"""Everyday CLI use: help, --version, forget, folders in status, unquoted queries, copies, no results, Ctrl-C,
the caption progress, --preview."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, copy_examples, write_photo


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_help_lists_photo_commands_first_and_describes_every_option(library):
    from imgtxt.cli.main import app

    out = library.run("--help").stdout
    order = ["index", "search", "caption", "similar", "status", "serve", "forget", "features", "train", "eval"]
    positions = [re.search(rf"^\W*{name}\s", out, re.M).start() for name in order]  # command list rows
    assert positions == sorted(positions), out
    assert "<bool>" not in out
    for name in app.list_commands(None):
        command = app.get_command(None, name)
        text = library.run(name, "--help").stdout
        assert "<bool>" not in text, name
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"imgtxt {name} {param.opts} has no help"
    assert library.run("--version").stdout.strip().startswith("imgtxt ")
    version = subprocess.run([sys.executable, "-m", "imgtxt", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == library.run("--version").stdout.strip()


def test_unquoted_query_copies_and_no_results(library, tmp_path):
    photos = copy_examples(tmp_path / "p")
    shutil.copy2(photos[0], tmp_path / "p" / "again.jpg")
    library.run("index", tmp_path / "p", "-q")
    unquoted = json_lines(library.run("search", "a", "cat", "on", "a", "table", "--json").stdout)
    quoted = json_lines(library.run("search", "a cat on a table", "--json").stdout)
    assert unquoted == quoted and len(quoted) == 6                          # 7 files, 6 distinct photos
    [double] = [h for h in quoted if "copies" in h]
    assert {double["path"], *double["copies"]} == {str(photos[0]), str(tmp_path / "p" / "again.jpg")}
    assert len(json_lines(library.run("search", "a cat", "--all-copies", "--json").stdout)) == 7
    tsv = library.run("search", "a cat").stdout.splitlines()
    assert len(tsv) == 6 and sum(len(line.split("\t")) == 4 for line in tsv) == 1   # the copy as a 4th field

    none = library.run("search", "a cat", "--min-score", "5")
    assert none.stdout == "" and "no photos match" in none.stderr


def test_forget_and_folders_in_status(library, tmp_path):
    copy_examples(tmp_path / "a", ["cat", "coffee"])
    copy_examples(tmp_path / "b", ["rocket"])
    library.run("index", tmp_path / "a", tmp_path / "b", "-q")
    status = json.loads(library.run("status", "--json").stdout)
    assert status["folders"] == [{"path": str(tmp_path / "a"), "photos": 2}, {"path": str(tmp_path / "b"), "photos": 1}]
    text = library.run("status").stdout
    assert f"2  {tmp_path / 'a'}" in text and f"1  {tmp_path / 'b'}" in text
    result = library.run("forget", tmp_path / "a")
    assert "forgot 2 photos" in result.stdout and (tmp_path / "a" / "cat.jpg").is_file()
    status = json.loads(library.run("status", "--json").stdout)
    assert status["photos"] == 1 and [f["path"] for f in status["folders"]] == [str(tmp_path / "b")]
    assert [h["path"] for h in json_lines(library.run("search", "a cat", "--json").stdout)] == [
        str(tmp_path / "b" / "rocket.jpg")]
    missing = library.run("forget", tmp_path / "a", ok=False)
    assert missing.exit_code == 1 and "nothing indexed" in missing.stderr


def test_ctrl_c_says_what_was_saved_and_the_index_answers(library, tmp_path):
    """A real SIGINT to a real first run: the message, then status/search from what was committed."""
    # 300 photos: the tiny model commits a batch every ~50 ms, so 40 left a ~0.5 s window that a loaded
    # machine's polling could miss (the run finished before the signal); 300 leave several seconds
    for i in range(300):
        write_photo(tmp_path / "p" / f"{i:03}.jpg", seed=i)
    db = library.index / "index.db"
    run = subprocess.Popen([sys.executable, "-m", "imgtxt", "index", str(tmp_path / "p"), "--model", str(library.model),
                            "--batch-size", "4", "--workers", "1", "-q"], env=library.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import sqlite3

    def committed() -> int:
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                return conn.execute("SELECT count(*) FROM photos").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.OperationalError:
            return 0

    deadline = time.time() + 240
    while committed() < 4 and run.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before it could be interrupted"
    os.kill(run.pid, signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    saved = int(err.split("interrupted: ")[1].split(" photos saved")[0])
    assert "run `imgtxt index` again to continue" in err and "Traceback" not in err
    assert 4 <= saved < 300
    status = json.loads(library.run("status", "--json").stdout)
    assert status["photos"] == saved and status["model"].startswith("tiny-")
    assert len(json_lines(library.run("search", "a dog", "-n", "100", "--json").stdout)) == saved
    again = json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)
    assert (again["unchanged"], again["indexed"]) == (saved, 300)


def test_caption_reports_the_one_time_bank_embedding(library, tmp_path):
    copy_examples(tmp_path / "p", ["cat"])
    library.run("index", tmp_path / "p", "-q")                               # queries then use the tiny model
    first = library.run("caption", REPO / "examples" / "cat.jpg", "--json")
    assert "embedding 12 captions once" in first.stderr and len(json_lines(first.stdout)) == 5
    second = library.run("caption", REPO / "examples" / "cat.jpg", "--json")
    assert "embedding" not in second.stderr and second.stdout == first.stdout


def test_caption_progress_reaches_the_total(tiny_model, tmp_path, monkeypatch):
    from imgtxt.library.query import caption_vectors

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path))
    captions = [f"a dog number {i} on the beach" for i in range(5000)]
    seen = []
    caption_vectors(tiny_model, captions[:300] * 1, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(128, 300), (256, 300), (300, 300)]     # after each batch of 128 captions
    seen.clear()
    caption_vectors(tiny_model, captions[:4500], progress=lambda done, total: seen.append((done, total)))
    assert seen == [(min(done, 4500), 4500) for done in range(128, 4500 + 128, 128)]


def test_preview_falls_back_to_text_off_a_terminal_and_draws_on_one(library, tmp_path, monkeypatch):
    import imgtxt.cli.preview

    copy_examples(tmp_path / "p", ["cat", "rocket"])
    library.run("index", tmp_path / "p", "-q")
    plain = library.run("search", "a cat", "--preview").stdout
    assert plain == library.run("search", "a cat").stdout                  # a pipe: the usual lines

    from textual_image.renderable import HalfcellImage

    monkeypatch.setattr(imgtxt.cli.preview, "image_class", lambda: HalfcellImage)  # as if the terminal drew images
    drawn = library.run("search", "a cat", "--preview").stdout
    assert str(tmp_path / "p" / "cat.jpg") in drawn and "▀" in drawn         # text line + image cells
    assert len(drawn.splitlines()) > 2 * 4


def test_readme_first_search_finds_the_cat_and_calls_it_strong(tmp_path):
    # README's first command with the shipped model over the six example photos: its query describes cat.jpg,
    # so the cat must come first and be labelled strong (no "no strong matches" line above it).
    import imgtxt

    readme = (REPO / "README.md").read_text()
    query = re.search(r'imgtxt search "([^"]+)" --index examples-index', readme).group(1)
    lib = imgtxt.Library(index_dir=tmp_path / "index")
    lib.index([str(copy_examples(tmp_path / "examples")[0].parent)])
    hits = lib.search(query, n=3)
    assert Path(hits[0].path).name == "cat.jpg" and hits[0].level == "strong", (query, hits)
    assert all(h.level != "strong" for h in hits[1:]), hits
