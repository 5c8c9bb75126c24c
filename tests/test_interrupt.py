"""Killing an index run: searches keep answering during the run and after `kill -9`, the database stays intact,
and the rerun finishes the job without losing, duplicating or redoing committed photos. Real subprocesses."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

from conftest import REPO, copy_examples, write_photo

N_NEW = 48


def count_photos(db) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT count(*) FROM photos").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0


def test_search_during_a_run_then_kill_9_then_rerun(library, tmp_path):
    folder = tmp_path / "p"
    examples = {str(p) for p in copy_examples(folder)}
    library.run("index", folder, "-q")                                  # a complete index of 6 photos
    for i in range(N_NEW):
        write_photo(folder / "new" / f"{i:03}.jpg", seed=100 + i, size=(640, 480))

    db = library.index / "index.db"
    cmd = [str(REPO / ".venv" / "bin" / "imgtxt"), "index", str(folder), "--model", str(library.model),
           "--batch-size", "4", "--workers", "1", "--quiet"]
    run = subprocess.Popen(cmd, env=library.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 240
        while count_photos(db) < 6 + 4 and run.poll() is None and time.time() < deadline:
            time.sleep(0.05)                                             # until the first batch is committed
        assert run.poll() is None, "the index run ended before it could be observed"
        # Freeze it mid-run: without torch the run can finish faster than a cold search starts.
        os.kill(run.pid, signal.SIGSTOP)

        # Search while the run is in progress: answers from the last complete index (search files not yet updated).
        search = library.subprocess("search", "a dog on the beach", "-n", "50", "--json")
        assert search.returncode == 0, search.stderr
        assert {json.loads(line)["path"] for line in search.stdout.splitlines()} == examples
        assert library.subprocess("status", "--json").returncode == 0
        assert run.poll() is None, "the index run ended during the search: nothing was shown"

        committed = count_photos(db)
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    finally:
        if run.poll() is None:
            run.kill()
    after_kill = count_photos(db)
    assert 6 < after_kill < 6 + N_NEW, "kill -9 was not mid-run"
    assert after_kill >= committed                                       # committed batches survive kill -9
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    search = library.subprocess("search", "a dog on the beach", "-n", "50", "--json")
    assert search.returncode == 0 and len(search.stdout.splitlines()) == 6   # still the last complete index

    # The rerun continues: committed photos are unchanged, the rest embedded once.
    summary = json.loads(library.run("index", folder, "--json", "-q").stdout)
    assert summary["unchanged"] == after_kill
    assert summary["added"] == summary["embedded"] == 6 + N_NEW - after_kill
    assert summary["indexed"] == 6 + N_NEW
    conn = sqlite3.connect(db)
    paths = [r[0] for r in conn.execute("SELECT path FROM photos")]
    assert len(paths) == len(set(paths)) == 6 + N_NEW
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    search = library.subprocess("search", "a dog on the beach", "-n", "100", "--json")
    assert len(search.stdout.splitlines()) == 6 + N_NEW


def test_a_second_index_run_waits_its_turn(library, tmp_path):
    """Two runs on one index would both embed the same photos: the second one is refused clearly."""
    import fcntl

    write_photo(tmp_path / "p" / "a.jpg", 1)
    library.index.mkdir(parents=True)
    with open(library.index / "index.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = library.run("index", tmp_path / "p", ok=False)
    assert result.exit_code == 1 and "another `imgtxt index` is running" in result.stderr
