"""The rule that decides which photos a run may remove: a root or a mount point that cannot be reached keeps its
photos. Its cases together: a broken symbolic link (with a trailing slash too), a missing or emptied folder, an
unmounted mount point inside a root, a root that is an unmounted mount point holding a stray file."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess

import pytest
from conftest import write_photo

from imgtxt.library import reach
from imgtxt.library.scan import Problem, scan


def summary_of(result) -> dict:
    return json.loads(result.stdout.splitlines()[-1])


def photo_count(library) -> int:
    with sqlite3.connect(library.index / "index.db") as conn:
        return conn.execute("SELECT count(*) FROM photos").fetchone()[0]


def remember_mount(library, folder) -> None:
    """What an earlier run records when `folder` was a mount point (its device differed from its parent's)."""
    with sqlite3.connect(library.index / "index.db") as conn:
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [reach.MOUNTS_META, json.dumps([str(folder)])])


# ------------------------------------------------------------------------------ the rule, without a disk

def test_decide_keeps_each_kind_of_unreachable_folder(tmp_path):
    root = str(tmp_path / "photos")
    os.makedirs(os.path.join(root, "nas"))
    rows = [f"{root}/nas/a.jpg", f"{root}/link/b.jpg", f"{root}/c.jpg"]
    problems = [Problem(f"{root}/link", "broken symbolic link")]
    meta = {reach.MOUNTS_META: json.dumps([f"{root}/nas"])}
    decided = reach.decide([root], [f"{root}/stray.jpg"], problems, rows, meta, set(), mount_check=lambda p: False)
    assert decided.offline == {f"{root}/nas": "a mount point that is not mounted now"}
    assert decided.unread == [f"{root}/link"]
    assert decided.mounts == [f"{root}/nas"]    # still remembered while it is away
    mounted = reach.decide([root], [f"{root}/c.jpg"], [], rows, meta, set(), mount_check=lambda p: p.endswith("nas"))
    assert mounted.offline == {} and mounted.mounts == [f"{root}/nas"]


@pytest.mark.parametrize("how", ["broken-link", "missing", "empty"])
def test_decide_keeps_an_unreachable_root_and_prune_removes_it(tmp_path, how):
    root = tmp_path / "drive"
    if how == "broken-link":
        os.symlink(tmp_path / "unplugged", root)
    elif how == "empty":
        root.mkdir()
    rows = [f"{root}/a.jpg"]
    problems = [Problem(str(root), "broken symbolic link")] if how == "broken-link" else []
    kept = reach.decide([str(root)], [], problems, rows, {}, set(), mount_check=lambda p: False)
    assert list(kept.offline) == [str(root)]
    pruned = reach.decide([str(root)], [], problems, rows, {}, set(), prune=True, mount_check=lambda p: False)
    assert list(pruned.pruned) == [str(root)] and pruned.keep == []


def test_the_scan_reports_the_mount_points_it_crosses():
    if not os.path.ismount("/dev/shm") or not os.path.isdir("/dev"):
        pytest.skip("no /dev/shm mount point here")
    mounts: set[str] = set()
    for _ in scan(["/dev"], suffixes={".jpg"}, mounts=mounts):
        pass
    assert "/dev/shm" in mounts


# ------------------------------------------------------------------------------ the rule, through `imgtxt index`

@pytest.mark.parametrize("trailing_slash", [False, True])
def test_a_root_that_is_a_broken_link_keeps_its_photos(library, tmp_path, trailing_slash):
    write_photo(tmp_path / "drive" / "a1.jpg", seed=1)
    write_photo(tmp_path / "drive" / "a2.jpg", seed=2)
    os.symlink(tmp_path / "drive", tmp_path / "Pictures")
    root = str(tmp_path / "Pictures") + ("/" if trailing_slash else "")
    library.run("index", root, "-q")
    os.rename(tmp_path / "drive", tmp_path / "unplugged")           # the link now points nowhere
    result = library.run("index", root, "--json")
    s = summary_of(result)
    assert (s["removed"], s["indexed"]) == (0, 2), s
    assert "broken symbolic link" in result.stderr and "--prune" in result.stderr
    os.rename(tmp_path / "unplugged", tmp_path / "drive")           # plugged in again: nothing to redo
    s = summary_of(library.run("index", root, "--json", "-q"))
    assert (s["unchanged"], s["embedded"], s["indexed"]) == (2, 0, 2)


def test_a_linked_album_inside_a_root_keeps_its_photos_while_its_drive_is_away(library, tmp_path):
    write_photo(tmp_path / "drive" / "b1.jpg", seed=1)
    write_photo(tmp_path / "Pictures" / "a1.jpg", seed=2)
    os.symlink(tmp_path / "drive", tmp_path / "Pictures" / "album")
    library.run("index", tmp_path / "Pictures", "-q")
    os.rename(tmp_path / "drive", tmp_path / "unplugged")
    s = summary_of(library.run("index", tmp_path / "Pictures", "--json", "-q"))
    assert (s["removed"], s["indexed"]) == (0, 2), s


def test_a_remembered_mount_point_that_is_now_an_empty_folder_keeps_its_photos(library, tmp_path):
    """Without root: the earlier run's record of the mount point is written directly."""
    write_photo(tmp_path / "Pictures" / "a1.jpg", seed=1)
    write_photo(tmp_path / "Pictures" / "nas" / "n1.jpg", seed=2)
    write_photo(tmp_path / "Pictures" / "nas" / "n2.jpg", seed=3)
    library.run("index", tmp_path / "Pictures", "-q")
    remember_mount(library, tmp_path / "Pictures" / "nas")
    shutil.rmtree(tmp_path / "Pictures" / "nas")
    (tmp_path / "Pictures" / "nas").mkdir()                         # what an unmounted share leaves behind
    result = library.run("index", tmp_path / "Pictures", "--json")
    s = summary_of(result)
    assert (s["removed"], s["indexed"]) == (0, 3) and "not mounted" in result.stderr, s
    s = summary_of(library.run("index", tmp_path / "Pictures", "--json", "-q", "--prune"))
    assert (s["removed"], s["indexed"]) == (2, 1)


def can_mount(folder) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True, check=False)
    except OSError:
        return False
    return done.returncode == 0


def umount(folder) -> None:
    subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("where", ["inside-a-root", "the-root-with-a-stray-file"])
def test_an_unmounted_mount_point_keeps_its_photos(library, tmp_path, where):
    root = tmp_path / "Pictures"
    mount = root / "nas" if where == "inside-a-root" else root
    if not can_mount(mount):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        write_photo(root / "a1.jpg", seed=1)
        write_photo(mount / "n1.jpg", seed=2)
        write_photo(mount / "n2.jpg", seed=3)
        library.run("index", root, "-q")
    finally:
        umount(mount)
    if where != "inside-a-root":
        write_photo(root / "stray.jpg", seed=4)                   # a file written while the share was away
    else:
        write_photo(root / "a1.jpg", seed=1)
    result = library.run("index", root, "--json")
    s = summary_of(result)
    assert s["removed"] == 0 and "not mounted" in result.stderr, (s, result.stderr)
    assert photo_count(library) >= 3
