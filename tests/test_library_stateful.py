"""A stateful property test of the photo library: Hypothesis drives a folder of photos through additions, rewrites,
truncations, locks (chmod 000), renames, swaps, copies, deletions, unplugged drives, `forget`, index runs (plain,
`--rebuild`, `--prune`, some killed between two transactions) and searches, and after every step checks the index
against what the folders hold:

- every indexed photo's vector is a fresh embedding of the bytes its hash names (never another content's);
- nothing of a forgotten folder is indexed;
- after a run that completed, the index holds exactly: each readable photo under the folders with the hash of its
  bytes now; an unreadable one (truncated, emptied, locked) with its earlier row, if it had one; the photos of a folder
  that cannot be reached (unplugged, emptied) as they were, unless `--prune`;
- a search after a completed run finds exactly the indexed photos, each scored by its vector in SQLite.

A few examples run with the suite (IMGTXT_STATEFUL_EXAMPLES and IMGTXT_STATEFUL_STEPS raise them,
docs/reliability.md); on a failure Hypothesis prints the steps and a `@reproduce_failure` blob that replay it
(and `pytest --hypothesis-seed N` reruns a whole seed).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import write_photo

hypothesis = pytest.importorskip("hypothesis")
from collections import Counter  # noqa: E402

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

NAMES = ["a/p0.bmp", "a/p1.bmp", "a/sub/p2.bmp", "b/p3.bmp", "b/p4.bmp", "b/sub/p5.bmp"]
ROOTS = ["a", "b"]
SEEDS = st.integers(0, 4)      # few contents: copies and reused vectors happen
OUTCOMES: Counter = Counter()  # how the index runs ended, printed with -s: a check that runs do complete


class Killed(BaseException):
    """kill -9 between two transactions: nothing after it runs."""


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def make_machine(model_dir: Path, contents: dict, fresh: dict):
    from imgtxt.errors import ImgtxtError
    from imgtxt.library import photo_work
    from imgtxt.library.indexer import IndexRun, run_index
    from imgtxt.library.photo_library import Library
    from imgtxt.library.photo_work import Work, decode
    from imgtxt.model.images import ImageError
    from imgtxt.model.modelfile import TrainedModel

    model = TrainedModel.load(model_dir)
    real_opener = photo_work.regular_opener
    size = model.image_embedder().resize_size

    def photo_bytes(seed: int) -> bytes:
        if seed not in contents:
            with tempfile.TemporaryDirectory() as tmp:
                contents[seed] = write_photo(Path(tmp) / "p.bmp", seed=seed, size=(32, 24), fmt="BMP").read_bytes()
        return contents[seed]

    def vector_of(data: bytes):
        """A fresh embedding of these bytes, or None when they are no photo (cached by content)."""
        key = content_hash(data)
        if key not in fresh:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "p.bmp"
                path.write_bytes(data)
                result = decode(Work(str(path), 0, 0, None), size)
            fresh[key] = None if isinstance(result, ImageError) else \
                np.asarray(model.embed_images(result[0][None])[0], np.float16).astype(np.float32)
        return fresh[key]

    class PhotoLibrary(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.top = Path(tempfile.mkdtemp(prefix="imgtxt-stateful-"))
            self.index_dir = self.top / "index"
            self.files: dict[str, bytes] = {}          # relative path -> bytes, as the folders hold them now
            self.unplugged: set[str] = set()            # roots renamed away
            self.forgotten: set[str] = set()
            self.known: dict[str, bytes] = {}           # hash -> bytes of every content ever written
            self.locked: set[str] = set()               # names that cannot be read (chmod 000 as a user sees it)
            self.searchable = False                     # a run completed since the last killed one
            for root in ROOTS:
                (self.top / root).mkdir()

        def teardown(self):
            shutil.rmtree(self.top, ignore_errors=True)

        @initialize(seeds=st.lists(SEEDS, min_size=len(NAMES), max_size=len(NAMES)), present=st.sets(
            st.sampled_from(NAMES), min_size=2))
        def indexed_library(self, seeds, present):
            """A library indexed once: most steps then change something an index holds."""
            for name, seed in zip(NAMES, seeds):
                if name in present:
                    self.put(name, photo_bytes(seed))
            self.run("plain", None)

        # ------------------------------------------------------------------ the folders
        def path(self, name: str) -> Path:
            return self.top / name

        def reachable(self, name: str) -> bool:
            return name.split("/")[0] not in self.unplugged

        def put(self, name: str, data: bytes) -> None:
            self.path(name).parent.mkdir(parents=True, exist_ok=True)
            self.path(name).write_bytes(data)
            self.files[name] = data
            self.known[content_hash(data)] = data

        @rule(name=st.sampled_from(NAMES), seed=SEEDS)
        def write(self, name, seed):
            """Add a photo, or rewrite one in place (same inode; BMPs of one size have one length)."""
            if self.reachable(name):
                self.put(name, photo_bytes(seed))

        @precondition(lambda self: any(self.reachable(n) for n in self.files))
        @rule(data=st.data(), empty=st.booleans())
        def truncate(self, data, empty):
            """A sync client rewriting it: truncated or emptied for a moment."""
            name = data.draw(st.sampled_from(sorted(n for n in self.files if self.reachable(n))))
            whole = self.files[name]
            self.put(name, b"" if empty else whole[: len(whole) // 2])

        @precondition(lambda self: any(self.reachable(n) for n in self.files))
        @rule(data=st.data())
        def rename(self, data):
            name = data.draw(st.sampled_from(sorted(n for n in self.files if self.reachable(n))))
            target = data.draw(st.sampled_from([n for n in NAMES if n != name and self.reachable(n)] or [name]))
            if target == name:
                return
            self.path(target).parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.path(name), self.path(target))
            self.files[target] = self.files.pop(name)

        @precondition(lambda self: sum(self.reachable(n) for n in self.files) >= 2)
        @rule(data=st.data(), how=st.sampled_from(["mv both ways", "cp + touch -r"]))
        def swap(self, data, how):
            """Two photos swap names (mv both ways), or one takes the other's bytes in place, its mtime put back."""
            names = sorted(n for n in self.files if self.reachable(n))
            first = data.draw(st.sampled_from(names))
            second = data.draw(st.sampled_from([n for n in names if n != first]))
            one, two = self.path(first), self.path(second)
            if how == "mv both ways":
                stamp = one.stat().st_mtime_ns
                os.utime(two, ns=(stamp, stamp))
                os.replace(one, one.with_suffix(".tmp"))
                os.replace(two, one)
                os.replace(one.with_suffix(".tmp"), two)
                self.files[first], self.files[second] = self.files[second], self.files[first]
            else:
                stamp = one.stat().st_mtime_ns
                shutil.copyfile(two, one)
                os.utime(one, ns=(stamp, stamp))
                self.files[first] = self.files[second]

        @precondition(lambda self: any(self.reachable(n) for n in self.files))
        @rule(data=st.data())
        def delete(self, data):
            name = data.draw(st.sampled_from(sorted(n for n in self.files if self.reachable(n))))
            self.path(name).unlink()
            del self.files[name]

        @rule(name=st.sampled_from(NAMES))
        def lock_or_unlock(self, name):
            """chmod 000 or back (the mode change alters the ctime); as root, reading is refused by a patched opener."""
            if self.reachable(name) and name in self.files:
                os.chmod(self.path(name), 0o644 if name in self.locked else 0)
                self.locked ^= {name}

        @rule(root=st.sampled_from(ROOTS))
        def unplug_or_plug(self, root):
            """A drive unplugged (its root gone) or plugged back in."""
            away = self.top / (root + "-away")
            if root in self.unplugged:
                os.replace(away, self.top / root)
                self.unplugged.discard(root)
            else:
                os.replace(self.top / root, away)
                self.unplugged.add(root)

        @rule(folder=st.sampled_from(["a/sub", "b/sub"]))
        def forget(self, folder):
            try:
                Library(self.index_dir, model_dir).forget(self.path(folder))
            except ImgtxtError:
                return   # no index yet, nothing under it: nothing changed
            self.forgotten.add(folder)

        # ------------------------------------------------------------------ index runs
        def rows(self, db: str = "index.db") -> dict[str, tuple[str, bytes]]:
            if not (self.index_dir / db).exists():
                return {}
            conn = sqlite3.connect(self.index_dir / db)
            try:
                top = str(self.top) + "/"
                return {p.removeprefix(top): (h, e) for p, h, e in
                        conn.execute("SELECT path, hash, embedding FROM photos")}
            finally:
                conn.close()

        def expected(self, before: dict, prune: bool, continued: dict | None = None) -> dict[str, str]:
            """path -> hash the index must hold after a completed run (see the module's docstring). `continued`:
            the rows a killed rebuild had committed, which a rebuild run continues from; they are newer than
            `before` (read from the files then), so an unreachable root keeps them over its old rows."""
            out: dict[str, str] = {}
            for root in ROOTS:
                held = {n for n in self.files if n.startswith(root + "/")
                        and not any(n.startswith(f + "/") for f in self.forgotten)}
                if root in self.unplugged or not held:      # cannot be reached: kept unless --prune
                    if not prune:
                        for rows in (before, continued or {}):
                            out.update({n: h for n, (h, _) in rows.items() if n.startswith(root + "/")})
                    continue
                for name in held:
                    if name in self.locked:                  # cannot be read: its earlier row stays
                        if name in before:
                            out[name] = before[name][0]
                    elif vector_of(self.files[name]) is not None:
                        out[name] = content_hash(self.files[name])
                    elif name in before:                     # unreadable now: its earlier row stays
                        out[name] = before[name][0]
            return out

        @rule(mode=st.sampled_from(["plain", "plain", "rebuild", "prune"]))
        def index(self, mode):
            self.run(mode, None)

        @rule(mode=st.sampled_from(["plain", "rebuild"]))
        def index_again(self, mode):   # a second rule: a run is as likely as any change of the folders
            self.run(mode, None)

        @rule(mode=st.sampled_from(["plain", "rebuild", "prune"]), kill_after=st.integers(0, 2))
        def index_killed(self, mode, kill_after):
            self.run(mode, kill_after)

        def run(self, mode, kill_after):
            before = self.rows()
            continued = self.rows("index.db.rebuild") if mode == "rebuild" else None
            commits = []
            real_commit = IndexRun.commit

            def commit(run):
                if kill_after is not None and len(commits) >= kill_after:
                    raise Killed
                commits.append(1)
                real_commit(run)
            IndexRun.commit = commit
            locked = {str(self.path(n)) for n in self.locked}

            def opener(path, flags=os.O_RDONLY):
                if os.fspath(path) in locked:
                    raise PermissionError(13, "Permission denied", os.fspath(path))
                return real_opener(path, flags)
            photo_work.regular_opener = opener
            try:
                run_index(self.index_dir, [str(self.path(r)) for r in ROOTS], model, batch_size=2, workers=1,
                          log=lambda m: None, notice=lambda m: None, prune=mode == "prune", rebuild=mode == "rebuild")
            except Killed:
                OUTCOMES["killed"] += 1
                self.searchable = False   # the search files answer from the last completed run meanwhile
                return
            except ImgtxtError:      # nothing to index, a root missing that held nothing: nothing changed
                OUTCOMES["refused"] += 1
                assert {n: h for n, (h, _) in self.rows().items()} == {n: h for n, (h, _) in before.items()}
                return
            finally:
                IndexRun.commit, photo_work.regular_opener = real_commit, real_opener
            now = {n: h for n, (h, _) in self.rows().items()}
            OUTCOMES["completed"] += 1
            self.searchable = True
            assert now == self.expected(before, mode == "prune", continued), (mode, before.keys())

        @rule()
        def query(self):
            """A search after a completed run (and any `forget` since) finds every indexed photo and none other,
            each scored by its vector in SQLite: the search files never lag the database nor bring back a forgotten
            folder's photo."""
            rows = self.rows()
            if not self.searchable or not rows:
                return
            text = "dog running on the beach"    # no word of a folder or file name: the scores are the vectors'
            hits = Library(self.index_dir, model_dir).search(text, n=len(rows), all_copies=True)
            top = str(self.top) + "/"
            got = {hit.path.removeprefix(top): hit.score for hit in hits}
            assert got.keys() == rows.keys(), (sorted(got), sorted(rows))
            query = model.encode_query([text])[0]
            for name, score in got.items():
                stored = np.frombuffer(rows[name][1], np.float16).astype(np.float32)
                assert abs(score - float(stored @ query)) < 2e-3, (name, score, float(stored @ query))
            OUTCOMES["queries"] += 1

        # ------------------------------------------------------------------ after every step
        @invariant()
        def every_vector_is_of_the_bytes_its_hash_names(self):
            for name, (content, blob) in self.rows().items():
                assert content in self.known, (name, content)
                np.testing.assert_allclose(np.frombuffer(blob, np.float16).astype(np.float32),
                                           vector_of(self.known[content]), atol=2e-3, err_msg=name)

        @invariant()
        def nothing_of_a_forgotten_folder_is_indexed(self):
            assert not [n for n in self.rows() if any(n.startswith(f + "/") for f in self.forgotten)]

    return PhotoLibrary


CHUNKS = 4   # the examples are shared among CHUNKS test cases so that pytest-xdist spreads them over the cores


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_library_against_a_model_of_its_folders(tiny_model_dir, chunk):
    # 200 examples in all by default (about 70 s of wall time, 30 s of CPU, on a 2-core AMD EPYC); on a failure
    # Hypothesis prints the steps, a @reproduce_failure blob and the --hypothesis-seed that replays the chunk.
    machine = make_machine(tiny_model_dir, {}, {})
    examples = -(-int(os.environ.get("IMGTXT_STATEFUL_EXAMPLES", "200")) // CHUNKS)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=int(os.environ.get("IMGTXT_STATEFUL_STEPS", "10")),
        deadline=None, suppress_health_check=list(HealthCheck), print_blob=True))
    print("index runs:", dict(OUTCOMES))
