"""Which indexed photos a run may remove, by one rule: a root or a mount point that cannot be reached keeps
its photos (unless `--prune`).

A folder "cannot be reached" when:
- a root cannot be stat'ed: missing, a broken symbolic link (an unplugged drive's link), a link loop, no
  permission, an I/O error;
- a root shows nothing (no photo, no problem) although the index holds photos under it: an empty mount point;
- a folder that was a mount point in an earlier run (its device differed from its parent's) is not one now:
  an unmounted NAS share under ~/Pictures, or a root that is an unmounted mount point holding a stray file;
- a folder under a root could not be read (permission, a path too long, a broken link to a folder), or an
  indexed photo could not be stat'ed (a folder without its x bit): kept even with `--prune`, re-checked on
  every run.
An unmounted drive looks exactly like an emptied folder, so the photos stay and the run says so; `--prune`
(or `imgtxt forget`) removes them. The mount points seen are remembered in the index (meta "mount_points").
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from itertools import chain

from .photo_paths import is_under, path_key
from .scan import Problem, os_reason

MOUNTS_META = "mount_points"
UNREADABLE_FOLDER = ("cannot read folder", "path too long")


# A path that is no longer a photo file: its row goes. Any other reason a photo gave no vector now (permission
# denied, I/O error, a broken link, a truncated or empty file, NaN from the model) keeps an indexed photo's row.
GONE = ("not a regular file", "vanished while scanning")


def keeps_row(reason: str) -> bool:
    return reason not in GONE


def is_mount(path: str) -> bool:
    """A folder on another device than its parent (following links, as the scan does)."""
    try:
        st, parent = os.stat(path), os.stat(os.path.dirname(path.rstrip(os.sep)) or os.sep)
    except OSError:
        return False
    return st.st_dev != parent.st_dev or st.st_ino == parent.st_ino


def unreachable_reason(root: str) -> str | None:
    """Why a root cannot be looked at now, or None."""
    try:
        os.stat(root)
    except OSError as e:
        reason = os_reason(e)   # a root is looked at before the scan: it did not vanish while scanning
        return "missing" if reason == "vanished while scanning" else reason
    return None


def remembered_mounts(meta: dict) -> list[str]:
    try:
        value = json.loads(meta.get(MOUNTS_META, "[]"))
    except ValueError:
        return []   # a damaged record only loses the memory of mount points, never photos
    return [m for m in value if isinstance(m, str)] if isinstance(value, list) else []


@dataclass
class Reach:
    """The outcome of the rule for one run."""

    offline: dict[str, str] = field(default_factory=dict)  # folder key -> why it cannot be reached (kept)
    pruned: dict[str, str] = field(default_factory=dict)   # the same, removed because of --prune
    unread: list[str] = field(default_factory=list)        # folders under a root that could not be read
    mounts: list[str] = field(default_factory=list)        # mount points to remember after this run

    @property
    def keep(self) -> list[str]:
        return list(self.offline) + self.unread


def decide(roots: list[str], found_keys, problems: list[Problem], row_keys, meta: dict, scanned_mounts,
           prune: bool = False, mount_check=is_mount) -> Reach:
    """Apply the rule. `found_keys`: paths seen on disk; `row_keys`: indexed paths that did not match the disk;
    `scanned_mounts`: mount points the scan crossed into; `mount_check(path)`: injectable for tests."""
    reach = Reach()
    root_keys = [path_key(r) for r in roots]
    row_keys = list(row_keys)
    problem_keys = [path_key(p.path) for p in problems]

    def holds(key: str) -> bool:
        return any(is_under(k, [key]) for k in row_keys)

    def unreachable(key: str, reason: str) -> None:
        if not any(is_under(key, [k]) for k in [*reach.offline, *reach.pruned]):
            (reach.pruned if prune else reach.offline)[key] = reason

    for root, key in zip(roots, root_keys):
        if not holds(key):
            continue
        reason = unreachable_reason(root)
        if reason is None and not any(is_under(k, [key]) for k in chain(found_keys, problem_keys)):
            reason = "missing or empty"
        if reason is not None:
            unreachable(key, reason)
    remembered = remembered_mounts(meta)
    mounts_now = {path_key(m) for m in scanned_mounts} | {k for r, k in zip(roots, root_keys) if mount_check(r)}
    for mount in remembered:
        if not is_under(mount, root_keys) or mount in mounts_now:
            continue
        if mount_check(mount):
            mounts_now.add(mount)
        elif holds(mount):
            unreachable(mount, "a mount point that is not mounted now")
    indexed = set(row_keys)
    for problem, key in zip(problems, problem_keys):
        folder_gone = problem.reason.startswith(UNREADABLE_FOLDER) or \
            any(k.startswith(key.rstrip(os.sep) + os.sep) for k in row_keys)   # it held photos: it was a folder
        photo_unread = key in indexed and keeps_row(problem.reason)   # an indexed photo that cannot be stat'ed now
        if (folder_gone or photo_unread) and not any(is_under(key, [k]) for k in [*reach.offline, *reach.pruned]):
            reach.unread.append(key)
    # Remember: the mount points of other roots, those seen now, and those kept because they are unmounted.
    reach.mounts = sorted({m for m in remembered if not is_under(m, root_keys)} | mounts_now
                          | {m for m in remembered if m in reach.offline})
    return reach
