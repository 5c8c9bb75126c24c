"""The vector search files: written only when vectors changed, appended for additions, validated against the
record in SQLite before they are mapped, exact below EXACT_MAX and through Annoy above (no CNN)."""
from __future__ import annotations

import os
import sqlite3
import stat
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


@pytest.fixture(params=["exact", "annoy"])
def kind(request, monkeypatch):
    """Each test below runs on both layouts: the float32 matrix, and Annoy (EXACT_MAX lowered below the library)."""
    if request.param == "annoy":
        monkeypatch.setattr(vector_index, "EXACT_MAX", 50)
        monkeypatch.setattr(vector_index, "SEARCH_K", 60)     # so Annoy answers, not the scan of everything
    return request.param


def test_unchanged_runs_write_nothing_and_additions_are_appended(tmp_path, kind):
    store = Store(tmp_path)
    add(store, clustered(300, 0))
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert (synced.action, synced.live) == ("rebuilt", 300) and "there was none" in synced.reason
    before = files(tmp_path)
    assert {name.rsplit(".", 1)[1] for name in before} == ({"vec"} if kind == "exact" else {"vec", "proj", "ann"})

    time.sleep(0.01)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged"
    assert files(tmp_path) == before                                     # not rewritten: same mtime, inode, size

    add(store, clustered(20, 1), start=300)                               # +7%: appended, the build is kept
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert (synced.action, synced.rows, synced.live) == ("appended", 20, 320)
    after = files(tmp_path)
    assert {name: after[name] for name in before} == before and len(after) == len(before) + 1
    query = clustered(1, 7)[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))
    # The additions are found before any rebuild: a query equal to an appended photo finds it first.
    assert search(tmp_path, clustered(20, 1)[4], 1)[1][0][0] == 305

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
def test_files_that_do_not_match_the_record_are_never_mapped(tmp_path, damage, kind):
    store = Store(tmp_path)
    add(store, clustered(200, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    (path,) = tmp_path.glob("vectors-*.vec" if kind == "exact" else "vectors-*.ann")
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


@pytest.mark.parametrize("damage", ["garble-vec", "garble-ann", "garble-proj", "garble-add"])
def test_garbled_files_of_the_right_size_are_caught_by_their_digest_with_a_notice(tmp_path, damage, kind):
    store = Store(tmp_path)
    add(store, clustered(200, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    add(store, clustered(5, 1), start=200)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "appended"
    suffix = damage.split("-")[1] if kind == "annoy" else {"garble-add": "add"}.get(damage, "vec")
    (path,) = tmp_path.glob(f"vectors-*.{suffix}")
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


def annoy_calls(monkeypatch) -> list[int]:
    """The search_k of every query that Annoy answered (rather than a scan of every vector)."""
    calls, real = [], vector_index.VectorIndex.__init__

    def init(self, *args):
        real(self, *args)
        if self.annoy is not None:
            found = self.annoy.get_nns_by_vector
            self.annoy = type("Spy", (), {"get_nns_by_vector": lambda _, q, k, search_k: calls.append(search_k)
                                          or found(q, k, search_k=search_k)})()
    monkeypatch.setattr(vector_index.VectorIndex, "__init__", init)
    return calls


def test_search_k_grows_with_the_results_asked_for_and_the_library():
    assert vector_index.search_k(10, 100_000) == vector_index.search_k(1, 100_000) == vector_index.SEARCH_K
    # beyond 10 results as the square root of the tens (measured: recall@24 and @100 stay above recall@10's)
    assert vector_index.search_k(24, 100_000) == round(3 ** 0.5 * vector_index.SEARCH_K) == 34_641
    assert vector_index.search_k(200, 100_000) == round(20 ** 0.5 * vector_index.SEARCH_K)
    ks = [vector_index.search_k(n, 100_000) for n in range(1, 2000, 7)]
    assert ks == sorted(ks)                                                  # never fewer for more results
    assert all(vector_index.search_k(n, 100_000) >= 2 * vector_index.candidates(n) for n in (11, 500, 10**5))
    assert vector_index.search_k(10, 10**7) == round(vector_index.SEARCH_K_FRACTION * 10**7) > vector_index.SEARCH_K
    # an earlier version's build keeps its own rule: EARLIER_SEARCH_K, in step with the results
    assert vector_index.search_k(24, 100_000, vector_index.N_TREES - 1) == 3 * vector_index.EARLIER_SEARCH_K


def test_a_build_of_fewer_trees_keeps_the_search_k_it_was_built_for(tmp_path, monkeypatch):
    """More trees reach the same recall with a smaller search_k (docs/vector-index.md). An index built by an
    earlier version (fewer trees) is searched with EARLIER_SEARCH_K, as that version did, until the next run that
    changes a vector rebuilds it with N_TREES."""
    assert vector_index.search_k(10, 100_000, vector_index.N_TREES) == vector_index.SEARCH_K
    assert vector_index.search_k(10, 100_000, vector_index.N_TREES - 1) == vector_index.EARLIER_SEARCH_K
    monkeypatch.setattr(vector_index, "EXACT_MAX", 500)
    monkeypatch.setattr(vector_index, "SEARCH_K_FRACTION", 0.0)
    monkeypatch.setattr(vector_index, "N_TREES", 4)                       # an earlier version's build
    store = Store(tmp_path)
    add(store, clustered(2400, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    monkeypatch.setattr(vector_index, "N_TREES", 8)                       # this version's
    monkeypatch.setattr(vector_index, "EARLIER_SEARCH_K", 2399)
    monkeypatch.setattr(vector_index, "SEARCH_K", 100)
    calls = annoy_calls(monkeypatch)
    queries = clustered(10, 2)
    for query in queries:
        vectors, hits = search(tmp_path, query, 10)
        assert vectors.record.trees == 4 and same(hits, exact(tmp_path, query, 10))
    assert calls == [2399] * len(queries)
    before = files(tmp_path)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged"   # a run that wrote no vector
    assert files(tmp_path) == before                                     # leaves the earlier build alone
    add(store, clustered(1, 1), start=2400)         # one photo (well below REBUILD_FRACTION): the run writes anyway
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert synced.action == "rebuilt" and "4 Annoy trees are fewer than this version builds (8)" in synced.reason
    vectors, hits = search(tmp_path, queries[0], 10)
    assert vectors.record.trees == 8 and calls[-1] == 100 and len(vectors.ids) == 2401


def test_builds_get_the_trees_measured_for_them(tmp_path, monkeypatch):
    """At 1M vectors 10 trees missed the recall asked, and at 100k 50 trees reach 10 trees' recall with a smaller
    search_k (docs/vector-index.md): every build gets N_TREES, and its record says so."""
    assert vector_index.trees_for(1000) == vector_index.trees_for(10**6) == vector_index.N_TREES == 50
    monkeypatch.setattr(vector_index, "EXACT_MAX", 100)
    store = Store(tmp_path)
    add(store, clustered(250, 0))
    assert vector_build.sync(store, "m", DIM, "cosine").action == "rebuilt"
    vectors = search(tmp_path, clustered(1, 1)[0], 1)[0]
    assert vectors.record.kind == "annoy-pca" and vectors.record.trees == vector_index.N_TREES


def test_annoy_above_exact_max_finds_the_true_neighbours(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_index, "EXACT_MAX", 500)
    monkeypatch.setattr(vector_index, "SEARCH_K_FRACTION", 0.0)        # SEARCH_K alone, set below
    store = Store(tmp_path)
    add(store, clustered(480, 0))
    assert vector_build.sync(store, "m", DIM, "cosine").action == "rebuilt"
    add(store, clustered(30, 1), start=480)                             # 6%: would be appended, but past 500
    synced = vector_build.sync(store, "m", DIM, "cosine")
    assert synced.action == "rebuilt" and "past exact search" in synced.reason
    assert {p.suffix for p in tmp_path.glob("vectors-*")} == {".vec", ".proj", ".ann"}
    assert {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.glob("vectors-*")} == {0o600}   # private, as the db
    add(store, clustered(1890, 9), start=510)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "rebuilt"
    calls = annoy_calls(monkeypatch)
    vectors = search(tmp_path, clustered(1, 1)[0], 1)[0]
    assert vectors.record.kind == "annoy-pca" and vectors.record.trees == vector_index.N_TREES
    assert vectors.record.projected == DIM          # PROJECTED_DIM is above DIM: a rotation, nothing dropped
    assert sorted(np.asarray(vectors.ids)) == list(range(1, 2401))      # every row once
    np.testing.assert_array_equal(np.asarray(vectors.vectors), decode_vectors(   # the rescored rows are the rows
        [r[0] for r in sqlite3.connect(tmp_path / "index.db").execute("SELECT embedding FROM photos ORDER BY id")],
        DIM)[np.asarray(vectors.ids) - 1])
    # A generous search_k (below the library's size, so Annoy still answers): the exact answer, scores included.
    monkeypatch.setattr(vector_index, "SEARCH_K", 2399)
    for query in clustered(20, 2):
        assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))
    assert len(calls) == 20 and set(calls) == {2399}
    # A small one: approximate, yet most of the true neighbours; search_k grows with the results asked for.
    monkeypatch.setattr(vector_index, "SEARCH_K", 100)
    recalls = []
    for query in clustered(50, 3):
        found = {i for i, _ in search(tmp_path, query, 10)[1]}
        recalls.append(len(found & {i for i, _ in exact(tmp_path, query, 10)}) / 10)
    assert np.mean(recalls) >= 0.9 and calls[-1] == 100
    search(tmp_path, clustered(1, 4)[0], 20)
    assert calls[-1] == vector_index.search_k(20, 2400) == 2 * vector_index.candidates(20)   # the floor, here
    # Asking for as many results as search_k would cover scores everything: exactly the exact answer.
    calls.clear()
    query = clustered(1, 3)[0]
    assert same(search(tmp_path, query, 600)[1], exact(tmp_path, query, 600))
    everything = search(tmp_path, query, 10**6)[1]                                  # -n beyond the library
    expected = exact(tmp_path, query, 2400)
    assert sorted(i for i, _ in everything) == sorted(i for i, _ in expected)       # (ties may swap places)
    assert np.allclose([s for _, s in everything], [s for _, s in expected], atol=1e-5)
    assert calls == []


def test_a_projection_narrower_than_the_vectors_picks_candidates_and_every_score_stays_exact(tmp_path,
                                                                                                monkeypatch):
    """Annoy ranks candidates in a PCA projection (here 8 of 16 dimensions); the results are rescored on the
    full vectors, so their scores are the exact ones and the true neighbours are found."""
    monkeypatch.setattr(vector_index, "EXACT_MAX", 500)
    monkeypatch.setattr(vector_index, "PROJECTED_DIM", 8)
    monkeypatch.setattr(vector_index, "SEARCH_K_FRACTION", 0.0)
    monkeypatch.setattr(vector_index, "SEARCH_K", 1500)
    store = Store(tmp_path)
    add(store, clustered(2400, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    vectors = search(tmp_path, clustered(1, 1)[0], 1)[0]
    assert vectors.record.projected == 8 and vectors.annoy.f == 8 and vectors.basis.shape == (DIM, 8)
    (ann,) = tmp_path.glob("vectors-*.ann")
    assert ann.stat().st_size % vector_index.annoy_node_bytes(8) == 0
    recalls = []
    for query in clustered(30, 2):
        hits, expected = search(tmp_path, query, 10)[1], exact(tmp_path, query, 10)
        recalls.append(len({i for i, _ in hits} & {i for i, _ in expected}) / 10)
        truth = dict(exact(tmp_path, query, 2400))
        assert all(abs(score - truth[i]) < 1e-5 for i, score in hits)       # rescored: exact scores
    assert np.mean(recalls) >= 0.95


def test_the_projection_keeps_the_directions_the_vectors_vary_in():
    """Vectors in a 3-d affine subspace of 16-d: the mean and 3 axes reproduce every score up to a constant."""
    rng = np.random.default_rng(0)
    offset, axes = rng.normal(size=DIM), np.linalg.qr(rng.normal(size=(DIM, 3)))[0]
    vectors = (offset + rng.normal(size=(500, 3)) @ axes.T).astype(np.float32)
    mean, basis = vector_build.fit_projection(vectors, 3, seed=1)
    assert basis.shape == (DIM, 3) and np.allclose(basis.T @ basis, np.eye(3), atol=1e-5)
    np.testing.assert_allclose(mean, vectors.mean(axis=0), atol=1e-5)
    query = rng.normal(size=DIM).astype(np.float32)
    exact_scores, projected = vectors @ query, ((vectors - mean) @ basis) @ (query @ basis)
    np.testing.assert_allclose(exact_scores - projected, (mean @ query) * np.ones(500), atol=1e-3)


def test_an_index_of_the_full_width_annoy_version_is_searched_exactly_then_rebuilt(tmp_path):
    """The previous Annoy layout (an .ann over the full vectors and an .ids file, kind "annoy"): searched exactly
    with a notice, never handed to Annoy, then rebuilt by the next run; SQLite's rows stay as they were."""
    store = Store(tmp_path)
    add(store, clustered(300, 0))
    stem = "vectors-m-0123abcd"
    node = np.dtype([("head", "<i4", (4,)), ("vector", "<f4", (DIM,))])
    ann = np.zeros(310, node).tobytes()
    (tmp_path / f"{stem}.ann").write_bytes(ann)
    (tmp_path / f"{stem}.ids").write_bytes(np.arange(1, 301, dtype="<i8").tobytes())
    store.set_meta(vec_model="m", vec_file=stem, vec_kind="annoy", vec_count=300, vec_trees=10, vec_dim=DIM,
                   vec_bytes=len(ann), vec_add=0, vec_live=300, vec_max_id=300, vec_generation=10**6,
                   vec_synced_at="2026-01-01T00:00:00.000000",
                   vec_digest=vector_index.digest(tmp_path / f"{stem}.ann", len(ann)),
                   vec_ids_digest=vector_index.digest(tmp_path / f"{stem}.ids", 2400), vectors_dirty=0)
    rows_before = sqlite3.connect(tmp_path / "index.db").execute("SELECT * FROM photos ORDER BY id").fetchall()
    conn = open_readonly(tmp_path)
    notices: list[str] = []
    found = vector_index.open_vectors(tmp_path, read_meta(conn), conn, "m", DIM, notices)
    assert isinstance(found, vector_index.ExactFromRows) and "earlier version" in notices[0]
    query = clustered(1, 5)[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))
    synced = vector_build.sync(store, "m", DIM, "cosine")               # no vector changed, yet rebuilt
    assert synced.action == "rebuilt" and "earlier version" in synced.reason
    assert not list(tmp_path.glob(f"{stem}.*"))
    assert sqlite3.connect(tmp_path / "index.db").execute("SELECT * FROM photos ORDER BY id").fetchall() == rows_before
    assert isinstance(search(tmp_path, query, 10)[0], vector_index.VectorIndex)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged"


def test_an_index_of_the_cells_version_is_upgraded_and_its_rows_are_untouched(tmp_path):
    """The previous version's files (a float32 .vec sorted into k-means cells, its record without vec_kind):
    searched exactly with a notice, then rebuilt by the next run; SQLite's rows stay as they were."""
    store = Store(tmp_path)
    vectors = clustered(300, 0)
    add(store, vectors)
    cells, ids = 2, np.arange(1, 301)
    stem = "vectors-m-0123abcd"
    layout = np.concatenate([ids.view(np.float32).reshape(-1), vectors.reshape(-1), vectors[:cells].reshape(-1)])
    data = layout.tobytes() + np.array([0, 150, 300], "<i8").tobytes()
    (tmp_path / f"{stem}.vec").write_bytes(data)
    store.set_meta(vec_model="m", vec_file=stem, vec_count=300, vec_cells=cells, vec_dim=DIM, vec_bytes=len(data),
                   vec_add=0, vec_live=300, vec_max_id=300, vec_synced_at="2026-01-01T00:00:00.000000",
                   vec_digest=vector_index.digest(tmp_path / f"{stem}.vec", len(data)), vec_add_digest="",
                   vectors_dirty=0)
    rows_before = sqlite3.connect(tmp_path / "index.db").execute("SELECT * FROM photos ORDER BY id").fetchall()
    conn = open_readonly(tmp_path)
    notices: list[str] = []
    found = vector_index.open_vectors(tmp_path, read_meta(conn), conn, "m", DIM, notices)
    assert isinstance(found, vector_index.ExactFromRows) and "earlier version" in notices[0]
    synced = vector_build.sync(store, "m", DIM, "cosine")               # no vector changed, yet rebuilt
    assert synced.action == "rebuilt" and "earlier version" in synced.reason
    assert not (tmp_path / f"{stem}.vec").exists()
    assert sqlite3.connect(tmp_path / "index.db").execute("SELECT * FROM photos ORDER BY id").fetchall() == rows_before
    query = clustered(1, 5)[0]
    assert isinstance(search(tmp_path, query, 10)[0], vector_index.VectorIndex)
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged"


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


def test_row_files_are_sampled_from_a_megabyte_and_whole_file_digests_of_before_still_check(tmp_path, monkeypatch):
    """The .vec and .add rows get a sampled digest above ROWS_FULL_DIGEST_BYTES (a cold search no longer hashes
    5.6 MB at 1,000 photos); an index whose record holds a whole-file digest (written before) still checks, and
    a changed byte in a sampled block is still caught."""
    monkeypatch.setattr(vector_index, "ROWS_FULL_DIGEST_BYTES", 4096)
    store = Store(tmp_path)
    add(store, clustered(600, 0))                                        # 600 x (8 + 16 x 4) bytes: sampled
    vector_build.sync(store, "m", DIM, "cosine")
    add(store, clustered(60, 1), start=600)                              # 60 x 72 bytes appended: sampled
    assert vector_build.sync(store, "m", DIM, "cosine").action == "appended"
    record = vector_index.Record.from_meta(read_meta(open_readonly(tmp_path)))
    assert record.digest.startswith("sampled:") and record.add_digest.startswith("sampled:")
    assert record.valid_for(tmp_path, "m", DIM)

    whole = vector_index.digest(record.main_path(tmp_path), record.bytes, sampled=False)
    assert not whole.startswith("sampled:")
    store.set_meta(vec_digest=whole)                                     # as the previous version recorded it
    record = vector_index.Record.from_meta(read_meta(open_readonly(tmp_path)))
    assert record.valid_for(tmp_path, "m", DIM)
    store.set_meta(vec_digest=vector_index.rows_digest(record.main_path(tmp_path), record.bytes))

    path = record.main_path(tmp_path)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF                                                    # inside the first sampled block
    path.write_bytes(bytes(data))
    record = vector_index.Record.from_meta(read_meta(open_readonly(tmp_path)))
    assert not record.valid_for(tmp_path, "m", DIM)


def hashed_files(monkeypatch) -> list[str]:
    """Names of the files a search hashes (vector_index.digest calls)."""
    seen, real = [], vector_index.digest
    monkeypatch.setattr(vector_index, "digest", lambda path, *a, **k: seen.append(path.name) or real(path, *a, **k))
    return seen


def test_files_unchanged_since_their_stamp_are_not_hashed_and_any_write_brings_the_digest_back(tmp_path, kind,
                                                                                                monkeypatch):
    store = Store(tmp_path)
    add(store, clustered(300, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    add(store, clustered(10, 1), start=300)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "appended"
    hashed = hashed_files(monkeypatch)
    query = clustered(1, 7)[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10)) and hashed == []

    # A write that keeps the size, and even puts the mtime back, changes the ctime: hashed, caught, exact answers.
    target = max(tmp_path.glob("vectors-*.ann" if kind == "annoy" else "vectors-*.vec"), key=os.path.getsize)
    st = target.stat()
    with open(target, "r+b") as f:
        f.seek(st.st_size // 2)
        f.write(b"\xff" * 64)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    conn, notices = open_readonly(tmp_path), []
    assert isinstance(vector_index.open_vectors(tmp_path, read_meta(conn), conn, "m", DIM, notices),
                      vector_index.ExactFromRows)
    assert target.name in hashed and len(notices) == 1 and "content differs" in notices[0]
    assert same(search(tmp_path, query, 10)[1], exact(tmp_path, query, 10))

    # The .add file has a stamp of its own: touching it hashes it alone.
    hashed.clear()
    assert vector_build.sync(store, "m", DIM, "cosine").action == "rebuilt"    # the damaged build is replaced
    add_file = next(tmp_path.glob("vectors-*.add"), None)
    assert add_file is None                                                   # (a rebuild leaves no additions)
    add(store, clustered(10, 2), start=310)
    vector_build.sync(store, "m", DIM, "cosine")
    add_file = next(tmp_path.glob("vectors-*.add"))
    hashed.clear()
    os.utime(add_file)
    search(tmp_path, query, 10)
    assert hashed == [add_file.name]


def test_an_index_without_stamps_is_hashed_until_an_index_run_stamps_it(tmp_path, monkeypatch):
    store = Store(tmp_path)
    add(store, clustered(300, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    store.set_meta(vec_stamps="", vec_add_stamp="")          # as written by the version before stamps
    hashed = hashed_files(monkeypatch)
    search(tmp_path, clustered(1, 7)[0], 10)
    assert len(hashed) == 1
    before = files(tmp_path)
    assert vector_build.sync(store, "m", DIM, "cosine").action == "unchanged" and files(tmp_path) == before
    hashed.clear()
    search(tmp_path, clustered(1, 7)[0], 10)
    assert hashed == []


def test_stamps_wait_for_the_clock_and_whole_second_file_systems_get_none(tmp_path, monkeypatch):
    store = Store(tmp_path)
    add(store, clustered(300, 0))
    vector_build.sync(store, "m", DIM, "cosine")
    record = vector_index.Record.from_meta(store.meta())
    ctime = int(record.stamps.rsplit(":", 1)[1])
    assert record.stamps and time.time_ns() >= ctime + vector_build.STAMP_SETTLE_NS
    # A file system with whole-second timestamps (FAT): a later write could keep the ctime, so no stamps.
    monkeypatch.setattr(vector_index, "file_stamp", lambda path: "1:2:3000000000:4000000000")
    vector_build._stamp(record, tmp_path)
    assert (record.stamps, record.add_stamp) == ("", "")
