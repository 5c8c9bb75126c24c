"""Finding the photos under some folders, without ever crashing on what a real disk holds.

`scan()` yields a `Found` for every photo file (by suffix) and a `Problem` for everything that could not
be looked at: an unreadable folder, a symbolic-link loop, a broken link, a FIFO named .jpg. Folders that
are never photos (hidden ones, Synology's @eaDir, .git, node_modules, Windows' System Volume Information)
and macOS `._*` resource forks are skipped silently; `--exclude GLOB` adds more.

Paths are absolute strings as the OS gives them; a non-UTF-8 name arrives with surrogate escapes
(os.fsdecode) and still opens, `store.path_key` makes it storable.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Iterable, Iterator

from imgtxt.model.images import HEIF_SUFFIXES, PHOTO_SUFFIXES, heif_available
from imgtxt.model.previews import RAW_SUFFIXES, raw_available, raw_hint

SKIP_DIR_NAMES = {"@eaDir", ".git", "node_modules", "System Volume Information", "$RECYCLE.BIN", "__MACOSX"}


@dataclass(frozen=True, slots=True)  # slots: a million-photo scan holds a million of these
class Found:
    path: str
    size: int
    mtime_ns: int
    ino: int = 0        # with ctime, what tells two files of equal size and mtime apart (swapped names, cp + touch -r)
    ctime_ns: int = 0


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str


def photo_suffixes() -> set[str]:
    return (PHOTO_SUFFIXES | (HEIF_SUFFIXES if heif_available() else set())
            | (RAW_SUFFIXES if raw_available() else set()))


def suffixes_needing_extras() -> dict[str, str]:
    """Photo suffixes this install cannot decode -> the skip reason, with the install that fixes it (HEIC/HEIF
    without pillow-heif, camera RAW without rawpy): such photos are listed as skipped, never silently dropped."""
    from imgtxt.errors import install_hint

    needs = {} if raw_available() else dict.fromkeys(RAW_SUFFIXES, raw_hint())
    if not heif_available():
        needs.update(dict.fromkeys(HEIF_SUFFIXES, f"HEIC/HEIF photo (needs pillow-heif: {install_hint('heif')})"))
    return needs


def is_hidden(name: str) -> bool:
    return name.startswith(".")  # also covers macOS "._photo.jpg" resource forks


def _excluded(name: str, relative: str, excludes: Iterable[str]) -> bool:
    return any(fnmatch(name, g) or fnmatch(relative, g) for g in excludes)


def os_reason(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "symbolic link loop"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if e.errno == errno.ENAMETOOLONG:
        return "path too long (over the system's PATH_MAX or NAME_MAX)"
    if e.errno == errno.ENOENT:
        broken_link = isinstance(e.filename, str) and os.path.islink(e.filename)
        return "broken symbolic link" if broken_link else "vanished while scanning"
    return e.strerror or str(e)


# SQLite integers are 64-bit: an mtime past 2262-04-11 (or before 1677) is clamped, so one odd file (a wrong
# clock, `touch -d 2263-01-01`) is indexed like any other instead of failing every run.
MTIME_NS_RANGE = (-(1 << 63), (1 << 63) - 1)


COUNTER_MASK = (1 << 63) - 1   # an inode number is unsigned 64-bit; SQLite's integers are signed


def clamp_mtime_ns(mtime_ns: int) -> int:
    return min(max(mtime_ns, MTIME_NS_RANGE[0]), MTIME_NS_RANGE[1])


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)  # from the directory listing, no stat needed
    except OSError:
        return False


def scan(roots: Iterable[str], excludes: Iterable[str] = (),
         suffixes: set[str] | None = None, mounts: set[str] | None = None) -> Iterator[Found | Problem]:
    """Every photo file under `roots` (folders or single files), each path once, in sorted order per folder.

    Symbolic links are followed (a linked album is part of the collection); a folder reached twice
    through links is reported as a loop instead of being walked forever. `mounts` collects the folders
    crossed into that are on another device than their parent (mount points, see reach.py).
    """
    # A photo this install cannot decode is listed as skipped with the install that fixes it, never dropped.
    needs_extra = suffixes_needing_extras() if suffixes is None else {}
    suffixes = suffixes if suffixes is not None else photo_suffixes()
    excludes = list(excludes)
    visited_dirs: set[tuple[int, int]] = set()
    seen_files: set[str] = set()

    def file_entry(path: str, st: os.stat_result) -> Found | Problem | None:
        if path in seen_files:
            return None
        seen_files.add(path)
        if not stat.S_ISREG(st.st_mode):
            return Problem(path, "not a regular file")
        return Found(path, st.st_size, clamp_mtime_ns(st.st_mtime_ns), st.st_ino & COUNTER_MASK,
                     clamp_mtime_ns(st.st_ctime_ns))

    for root in roots:
        root = os.path.abspath(root)
        try:
            st = os.stat(root)
        except OSError as e:
            yield Problem(root, os_reason(e))
            continue
        if not stat.S_ISDIR(st.st_mode):
            entry = file_entry(root, st)
            extra_hint = needs_extra.get(os.path.splitext(root)[1].lower())
            if extra_hint and isinstance(entry, Found):
                entry = Problem(root, extra_hint)
            if entry is not None:
                yield entry
            continue
        stack = [(root, st)]
        while stack:
            folder, folder_st = stack.pop()
            key = (folder_st.st_dev, folder_st.st_ino)
            if key in visited_dirs:
                if folder != root:
                    yield Problem(folder, "symbolic link loop (folder already scanned)")
                continue
            visited_dirs.add(key)
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as e:
                yield Problem(folder, f"cannot read folder: {os_reason(e)}")
                continue
            subfolders = []
            for entry in entries:
                name = entry.name
                if is_hidden(name):
                    continue
                if excludes and _excluded(name, os.path.relpath(entry.path, root).replace(os.sep, "/"), excludes):
                    continue
                try:
                    st = entry.stat()  # follows links
                except OSError as e:
                    # A folder (or link, or photo) that cannot be looked at is reported, never dropped
                    # silently: its photos would be missing without a word.
                    if os.path.splitext(name)[1].lower() in suffixes or entry.is_symlink() or _is_dir(entry):
                        yield Problem(entry.path, os_reason(e))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if name not in SKIP_DIR_NAMES:
                        subfolders.append((entry.path, st))
                        if mounts is not None and st.st_dev != folder_st.st_dev:
                            mounts.add(entry.path)
                elif os.path.splitext(name)[1].lower() in suffixes:
                    found = file_entry(entry.path, st)
                    if found is not None:
                        yield found
                elif needs_extra and os.path.splitext(name)[1].lower() in needs_extra:
                    found = file_entry(entry.path, st)
                    if isinstance(found, Found):
                        yield Problem(found.path, needs_extra[os.path.splitext(name)[1].lower()])
            stack.extend(reversed(subfolders))  # depth first, in name order
