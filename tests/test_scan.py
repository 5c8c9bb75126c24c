"""Walking photo folders: what is found, what is skipped silently, what is reported (no CNN needed)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from imgtxt.library.scan import Found, Problem, scan


def touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def results(roots, **kwargs):
    entries = list(scan([str(r) for r in roots], **kwargs))
    found = {os.path.relpath(e.path, roots[0]) for e in entries if isinstance(e, Found)}
    problems = {os.path.relpath(e.path, roots[0]): e.reason for e in entries if isinstance(e, Problem)}
    return found, problems


def test_finds_photo_suffixes_recursively_and_case_insensitively(tmp_path):
    for name in ["a.jpg", "b.JPEG", "sub/c.png", "sub/deeper/d.webp", "e.bmp", "f.gif", "g.tiff", "h.TIF"]:
        touch(tmp_path / name)
    for name in ["notes.txt", "movie.mp4", "raw.cr2.xmp", "noext"]:
        touch(tmp_path / name)
    found, problems = results([tmp_path])
    assert found == {"a.jpg", "b.JPEG", "sub/c.png", "sub/deeper/d.webp", "e.bmp", "f.gif", "g.tiff", "h.TIF"}
    assert problems == {}


def test_skips_hidden_system_and_tool_folders(tmp_path):
    keep = touch(tmp_path / "keep.jpg")
    for name in [".hidden.jpg", "._keep.jpg", ".thumbs/a.jpg", "@eaDir/keep.jpg/SYNOFILE_THUMB_M.jpg",
                 ".git/objects/x.png", "node_modules/pkg/logo.png", "System Volume Information/x.jpg",
                 "album/.cache/y.jpg"]:
        touch(tmp_path / name)
    found, _ = results([tmp_path])
    assert found == {keep.name}


def test_exclude_globs_match_names_and_relative_paths(tmp_path):
    for name in ["a.jpg", "b.png", "drafts/c.jpg", "trip/raw/d.jpg", "trip/e.jpg"]:
        touch(tmp_path / name)
    found, _ = results([tmp_path], excludes=["*.png", "drafts", "trip/raw"])
    assert found == {"a.jpg", "trip/e.jpg"}


def test_symlink_loops_broken_links_and_fifos_are_reported_not_fatal(tmp_path):
    touch(tmp_path / "album/a.jpg")
    os.symlink(tmp_path / "album", tmp_path / "album/loop")          # album/loop -> album
    os.symlink("self.jpg", tmp_path / "self.jpg")                     # self.jpg -> self.jpg (ELOOP)
    os.symlink(tmp_path / "missing.jpg", tmp_path / "broken.jpg")
    os.mkfifo(tmp_path / "pipe.jpg")                                  # opening it would block forever
    found, problems = results([tmp_path])
    assert found == {"album/a.jpg"}
    assert "loop" in problems["album/loop"]
    assert "loop" in problems["self.jpg"]
    assert problems["broken.jpg"] == "broken symbolic link"
    assert problems["pipe.jpg"] == "not a regular file"


def test_linked_album_is_followed_once(tmp_path):
    touch(tmp_path / "elsewhere/b.jpg")
    root = tmp_path / "photos"
    touch(root / "a.jpg")
    os.symlink(tmp_path / "elsewhere", root / "linked")
    found, problems = results([root])
    assert found == {"a.jpg", "linked/b.jpg"}
    assert problems == {}


def test_unreadable_folder_is_reported(tmp_path, monkeypatch):
    touch(tmp_path / "ok/a.jpg")
    locked = tmp_path / "locked"
    touch(locked / "b.jpg")
    if os.geteuid() == 0:
        # chmod cannot lock root out: make the OS call fail the way it does for a normal user.
        real_scandir = os.scandir

        def scandir(path):
            if os.path.abspath(path) == str(locked):
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
    else:
        locked.chmod(0)
    try:
        found, problems = results([tmp_path])
    finally:
        locked.chmod(0o755)
    assert found == {"ok/a.jpg"}
    assert problems == {"locked": "cannot read folder: permission denied"}


def test_non_utf8_file_names_are_found(tmp_path):
    name = os.fsdecode(b"caf\xe9.jpg")                               # Latin-1 name from an old camera/zip
    touch(tmp_path / name)
    found, _ = results([tmp_path])
    assert found == {name}
    assert os.path.exists(tmp_path / name)


def test_single_files_and_overlapping_roots_give_each_photo_once(tmp_path):
    a = touch(tmp_path / "a.jpg")
    touch(tmp_path / "sub/b.jpg")
    entries = list(scan([str(tmp_path), str(tmp_path / "sub"), str(a)]))
    paths = [e.path for e in entries if isinstance(e, Found)]
    assert sorted(paths) == sorted({str(a), str(tmp_path / "sub/b.jpg")})


def test_missing_root_is_a_problem(tmp_path):
    entries = list(scan([str(tmp_path / "nope")]))
    assert len(entries) == 1 and isinstance(entries[0], Problem)


def test_found_records_size_and_mtime(tmp_path):
    p = touch(tmp_path / "a.jpg", b"12345")
    os.utime(p, ns=(1_000_000_000, 1_500_000_000))
    (entry,) = list(scan([str(tmp_path)]))
    assert (entry.size, entry.mtime_ns) == (5, 1_500_000_000)


@pytest.mark.parametrize("name", ["a.heic", "b.HEIF"])
def test_heif_only_when_pillow_heif_is_installed(tmp_path, name):
    from imgtxt.model.images import heif_available

    touch(tmp_path / name)
    found, _ = results([tmp_path])
    assert (found == {name}) == heif_available()


@pytest.mark.parametrize("name", ["a.heic", "b.HEIF"])
def test_heif_without_pillow_heif_is_listed_as_skipped_with_the_install(tmp_path, name, monkeypatch):
    import imgtxt.library.scan

    monkeypatch.setattr(imgtxt.library.scan, "heif_available", lambda: False)
    touch(tmp_path / name)
    touch(tmp_path / "c.jpg")
    found, problems = results([tmp_path])
    assert found == {"c.jpg"}
    assert problems == {name: "HEIC/HEIF photo (needs pillow-heif: pip install '.[heif]' in the imgtxt checkout)"}


def test_camera_raw_is_found_with_the_raw_extra_and_a_problem_without(tmp_path, monkeypatch):
    from imgtxt.library import scan as scan_module
    hint = "camera RAW photo (needs rawpy: pip install '.[raw]' in the imgtxt checkout)"
    for name in ["a.CR2", "b.nef", "c.dng"]:
        touch(tmp_path / name)
    monkeypatch.setattr(scan_module, "raw_available", lambda: True)
    assert results([tmp_path]) == ({"a.CR2", "b.nef", "c.dng"}, {})
    monkeypatch.setattr(scan_module, "raw_available", lambda: False)
    assert results([tmp_path]) == (set(), {"a.CR2": hint, "b.nef": hint, "c.dng": hint})
    assert results([tmp_path / "c.dng"]) == (set(), {".": hint})   # a single file given as a root
