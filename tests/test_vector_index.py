"""The vector search files: written only when vectors changed, appended for additions, validated against the
record in SQLite before they are mapped, exact below EXACT_MAX and by k-means cells above (no CNN)."""
from __future__ import annotations

import os
import sqlite3
import time

import numpy as np
import pytest

from imgtxt.library import vector_build, vector_index
from imgtxt.library.store import Store, decode_vectors, open_readonly, read_meta
from imgtxt.model.modelfile import order_scores

DIM = 16


def clustered(n: int, seed: int, clusters: int = 40) -> np.ndarray:
    """Unit vectors in clusters, like photo embeddings (random unit vectors have no neighbours to find)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(size=(clusters, DIM))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def add(store: Store, vectors: np.ndarray, start: int = 0, model: str = "m") -> None:
    with store.db.atomic():
        for i, v in enumerate(vectors, start):
            store.put_photo(f"/p/{i:06}.jpg", 1, 1, f"h{i}", 1, 1, v, model)


def files(folder) -> dict[str, tuple[int, int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino, p.stat().st_size) for p in folder.glob("vectors-*")}


def search(folder, query: np.ndarray, n: int, model: str = "m"):
    conn = open_readonly(folder)
    vectors = vector_index.open_vectors(folder, read_meta(conn), conn, model, DIM)
    ids, scores = vectors.search(query, n + vectors.dead, lambda images: np.asarray(images) @ query)
    live = {r[0] for r in conn.execute("SELECT id FROM photos")}
    kept = [(int(i), float(s)) for i, s in zip(ids, scores) if int(i) in live][:n]
    return vectors, kept


def exact(folder, query: np.ndarray, n: int):
    conn = sqlite3.connect(folder / "index.db")
    rows = conn.execute("SELECT id, embedding FROM photos").fetchall()
    scores = decode_vectors([r[1] for r in rows], DIM) @ query
    order = np.argsort(-scores, kind="stable")[:n]
    return [(rows[i][0], float(scores[i])) for i in order]


def same(hits, expected) -> bool:
    return [i for i, _ in hits] == [i for i, _ in expected] and np.allclose([s for _, s in hits],
                                                                             [s for _, s in expected], atol=1e-5)


def test_unchanged_runs_write_nothing_and_additions_are_appended(tmp_path):
    store = Store(tmp_path)
    add(store, clustered(300, 0))
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert (synced.action, synced.live) == ("rebuilt", 300) and "there was none" in synced.reason
    before = files(tmp_path)
    assert len(before) == 1

    time.sleep(0.01)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged"
    assert files(tmp_path) == before                                     # not rewritten: same mtime, inode, size

    add(store, clustered(20, 1), start=300)                               # +7%: appended, the build is kept
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert (synced.action, synced.rows, synced.live) == ("appended", 20, 320)
    after = files(tmp_path)
    main = next(name for name in before)
    assert after[main] == before[main] and len(after) == 2
    query = clustered(1, 7)[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))

    # A photo re-embedded in place keeps its id; its appended row answers, not the one in the build.
    target = clustered(1, 8)[0]
    store.put_photo("/p/000005.jpg", 2, 2, "new", 1, 1, target, "m")
    assert vector_build.sync(store, "m", DIM, "cosine").action == "appended"
    hits = search(tmp_path, target, 3)[1]
    assert hits[0][0] == 6 and hits[0][1] == pytest.approx(1.0, abs=1e-3)   # ids start at 1
    assert [i for i, _ in hits].count(6) == 1

    # Removals change only the recorded count; the dead ids are over-fetched and dropped by the caller.
    store.remove_photos([f"/p/{i:06}.jpg" for i in range(10)])
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged"
    vectors, hits = search(tmp_path, query, 10)
    assert len(vectors) == 310 and vectors.dead >= 10
    assert same(hits, exact(tmp_path, query, 10))


def test_many_additions_or_another_model_rebuild_and_old_files_go(tmp_path):
    store = Store(tmp_path)
    add(store, clustered(100, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    old = set(files(tmp_path))
    add(store, clustered(30, 1), start=100)                               # 30% > REBUILD_FRACTION
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert synced.action == "rebuilt" and "added or changed" in synced.reason
    assert not old & set(files(tmp_path)) and len(files(tmp_path)) == 1
    add(store, clustered(130, 2), model="m2")                             # every row re-embedded by another model
    synced = vector_build.sync(store, "m2", DIM, "cosine")
    assert synced.action == "rebuilt" and "model changed" in synced.reason
    assert all("-m2-" in name for name in files(tmp_path))
    store.remove_photos([f"/p/{i:06}.jpg" for i in range(130)])
    assert vector_build.sync(store, "m2", DIM, "cosine").action == "empty" and files(tmp_path) == {}


@pytest.mark.parametrize("damage", ["truncate", "delete", "record"])
def test_files_that_do_not_match_the_record_are_never_mapped(tmp_path, damage):
    store = Store(tmp_path)
    add(store, clustered(200, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    (path,) = tmp_path.glob("vectors-*.vec")
    if damage == "truncate":
        os.truncate(path, path.stat().st_size - 8)
    elif damage == "delete":
        path.unlink()
    else:
        store.set_meta(vec_count=199)
    query = clustered(1, 5)[0]
    vectors, hits = search(tmp_path, query, 10)
    assert isinstance(vectors, vector_index.ExactFromRows)               # answered from SQLite instead
    assert same(hits, exact(tmp_path, query, 10))
    synced = vector_build.sync(store, "m", DIM, "cosine")                 # the next run repairs it
    assert synced.action == "rebuilt" and "did not match" in synced.reason
    assert isinstance(search(tmp_path, query, 10)[0], vector_index.VectorIndex)


@pytest.mark.parametrize("damage", ["garble-vec", "garble-add"])
def test_garbled_files_of_the_right_size_are_caught_by_their_digest_with_a_notice(tmp_path, damage):
    store = Store(tmp_path)
    add(store, clustered(200, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    add(store, clustered(5, 1), start=200)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "appended"
    (path,) = tmp_path.glob("vectors-*.vec" if damage == "garble-vec" else "vectors-*.add")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF                                         # one byte: same size, other content
    path.write_bytes(bytes(data))
    conn = open_readonly(tmp_path)
    notices: list[str] = []
    vectors = vector_index.open_vectors(tmp_path, read_meta(conn), conn, "m", DIM, notices)
    assert isinstance(vectors, vector_index.ExactFromRows)
    assert len(notices) == 1 and "damaged" in notices[0] and "imgtxt index" in notices[0]
    query = clustered(1, 5)[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))
    assert vector_build.sync(store, "m", DIM, "cosine").action == "rebuilt"


def test_an_index_of_the_annoy_versions_is_searched_exactly_then_rebuilt(tmp_path):
    """A schema-v2 index written with Annoy (float32 blobs, an .ann file, its facts in meta): searched exactly
    from SQLite with a notice until the next run, which writes the new files and removes the .ann file."""
    store = Store(tmp_path)
    vectors = clustered(50, 0)
    with store.db.atomic():
        for i, v in enumerate(vectors):
            store.put_photo(f"/p/{i:06}.jpg", 1, 1, f"h{i}", 1, 1, v.tobytes(), "m")   # float32, as then
    store.set_meta(vectors_size=1234, vectors_items=50, vectors_digest="x", model_id="m", photos=50)
    for key in ("vectors_dirty",):
        store.db.execute("DELETE FROM meta WHERE key = ?", [key])
    (tmp_path / "vectors-m.ann").write_bytes(b"\0" * 1234)
    conn = open_readonly(tmp_path)
    notices: list[str] = []
    found = vector_index.open_vectors(tmp_path, read_meta(conn), conn, "m", DIM, notices)
    assert isinstance(found, vector_index.ExactFromRows) and len(notices) == 1
    query = clustered(1, 5)[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert synced.action == "rebuilt" and synced.reason == "there was none"
    assert {p.suffix for p in tmp_path.glob("vectors-*")} == {".vec"}
    assert isinstance(search(tmp_path, query, 10)[0], vector_index.VectorIndex)
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))


def test_a_run_killed_after_appending_leaves_a_tail_that_is_ignored_then_cut(tmp_path):
    store = Store(tmp_path)
    add(store, clustered(200, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    add(store, clustered(5, 1), start=200)
    vector_build.sync(store, "m", DIM, "cosine")
    (tail,) = tmp_path.glob("vectors-*.add")
    size = tail.stat().st_size
    with open(tail, "ab") as f:                                           # appended, then killed before meta
        f.write(b"\x01" * 100)
    vectors, _ = search(tmp_path, clustered(1, 2)[0], 5)
    assert isinstance(vectors, vector_index.VectorIndex) and len(vectors.add_ids) == 5
    add(store, clustered(1, 3), start=205)
    vector_build.sync(store, "m", DIM, "cosine")
    assert tail.stat().st_size == size + vector_index.add_row_dtype(DIM).itemsize


def test_cells_above_exact_max_find_the_true_neighbours(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_index, "EXACT_MAX", 500)
    monkeypatch.setattr(vector_index, "CELL_SIZE", 64)
    store = Store(tmp_path)
    add(store, clustered(3000, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    vectors = search(tmp_path, clustered(1, 1)[0], 1)[0]
    assert isinstance(vectors, vector_index.VectorIndex) and len(vectors.centroids) == 47
    starts = np.asarray(vectors.starts)
    assert starts[0] == 0 and starts[-1] == 3000 and np.all(np.diff(starts) >= 0)
    assert sorted(np.asarray(vectors.ids)) == list(range(1, 3001))      # every row once, sorted by cell
    recalls = []
    for query in clustered(50, 2):
        found = {i for i, _ in search(tmp_path, query, 10)[1]}
        recalls.append(len(found & {i for i, _ in exact(tmp_path, query, 10)}) / 10)
    assert np.mean(recalls) >= 0.9
    # Asking for many results scores everything: exactly the exact answer.
    query = clustered(1, 3)[0]
    assert same(search(tmp_path, query, 600)[1], exact(tmp_path, query, 600))
    everything = search(tmp_path, query, 10**6)[1]                                  # -n beyond the library
    expected = exact(tmp_path, query, 3000)
    assert sorted(i for i, _ in everything) == sorted(i for i, _ in expected)       # (ties may swap places)
    assert np.allclose([s for _, s in everything], [s for _, s in expected], atol=1e-5)


def test_order_similarity_is_scored_by_the_models_own_function(tmp_path):
    store = Store(tmp_path)
    vectors = np.abs(clustered(300, 0))
    add(store, vectors)
    vector_build.sync(store, "m", DIM, "order")
    conn = open_readonly(tmp_path)
    index = vector_index.open_vectors(tmp_path, read_meta(conn), conn, "m", DIM)
    query = np.abs(clustered(1, 4))
    ids, scores = index.search(query[0], 5, lambda images: order_scores(np.asarray(images), query)[:, 0])
    stored = decode_vectors([r[0] for r in conn.execute("SELECT embedding FROM photos ORDER BY id")], DIM)
    expected = order_scores(stored, query)[:, 0]
    assert list(ids) == list(np.argsort(-expected, kind="stable")[:5] + 1)
