"""The index's data against hostile timing and values: a rebuild killed inside its swap, the clock stepping back,
NaN vectors, crafted meta values, a lock taken between two steps, temporary files left by a full disk."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
from conftest import write_photo


def summary_of(result) -> dict:
    return json.loads(result.stdout.splitlines()[-1])


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


def two_photos(library, tmp_path):
    folder = tmp_path / "p"
    write_photo(folder / "a.jpg", seed=1)
    write_photo(folder / "b.jpg", seed=2)
    library.run("index", folder, "-q")
    return folder


# ------------------------------------------------------------------------------ the --rebuild swap

class Killed(BaseException):
    """kill -9 at a chosen point: nothing after it runs."""


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_a_rebuild_killed_at_any_step_of_its_swap_leaves_an_index(library, tmp_path, step):
    folder = two_photos(library, tmp_path)
    calls = []

    def killing(real):
        def call(src, dst, *args, **kwargs):
            if "index.db" in os.fspath(src) + os.fspath(dst):   # the swap's file operations, not the vector files'
                calls.append((src, dst))
                if len(calls) > step:
                    raise Killed
            return real(src, dst, *args, **kwargs)
        return call

    real_replace, real_link = os.replace, os.link
    os.replace, os.link = killing(real_replace), killing(real_link)
    try:
        library.run("index", folder, "--rebuild", "-q")
    except Killed:
        pass
    finally:
        os.replace, os.link = real_replace, real_link
    assert (library.index / "index.db").is_file(), f"no index.db after {calls}"
    assert library.run("search", "a photo", "--json").stdout.count("\n") == 2
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["embedded"], s["indexed"]) == (0, 2)


def test_an_orphaned_complete_rebuild_is_swapped_in_not_re_embedded(library, tmp_path):
    """The state an earlier imgtxt left when killed between its two renames."""
    folder = two_photos(library, tmp_path)
    shutil.copy2(library.index / "index.db", library.index / "index.db.rebuild")
    os.rename(library.index / "index.db", library.index / "index.db.damaged")
    result = library.run("search", "a photo", ok=False)
    assert result.exit_code == 1 and "interrupted" in result.stderr
    s = summary_of(library.run("index", folder, "--json", "-q"))
    assert (s["embedded"], s["indexed"]) == (0, 2)
    assert not (library.index / "index.db.rebuild").exists()
