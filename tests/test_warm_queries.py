"""A Library keeps its index open between queries: a second query answers as a fresh Library would, also after
the index changed on disk (photos added, forgotten by another process, the database rebuilt, a vector file
damaged); repeated query text skips the encoder; BLAS runs one thread for a query."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
from conftest import REPO, copy_examples, write_photo

from imgtxt import Library

QUERIES = ("a dog running on the beach", "a cat sitting on a table", "a red car")


def answers(lib: Library, notices: bool = False) -> list:
    """Every query's matches; and no notice unless `notices` (the search files read, not exact search from SQLite)."""
    out = [[(m.rank, round(m.score, 6), m.path, m.id, m.copies) for m in lib.search(q, n=20)] for q in QUERIES]
    assert notices or lib.notices == [], lib.notices
    return out


def kept(lib: Library):
    return lib._kept._local.index


def fresh(tmp_path, model, notices: bool = False) -> list:
    lib = Library(tmp_path / "index", model=model)
    try:
        return answers(lib, notices)
    finally:
        lib.close()


def test_open_library_answers_as_a_fresh_one_as_the_index_changes(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    photos = copy_examples(tmp_path / "a")
    writer = Library(tmp_path / "index", model=tiny_model_dir)
    writer.index([tmp_path / "a"])
    warm = Library(tmp_path / "index", model=tiny_model_dir)

    first = answers(warm)
    held = kept(warm)
    assert answers(warm) == first == fresh(tmp_path, tiny_model_dir)
    assert kept(warm) is held, "an unchanged index was opened again"
    assert len(first[0]) == len(photos)

    for i in range(3):   # another Library (its own connection) adds photos
        write_photo(tmp_path / "b" / f"{i}.jpg", seed=40 + i)
    writer.index([tmp_path / "b"])
    after_add = answers(warm)
    assert after_add == fresh(tmp_path, tiny_model_dir) and len(after_add[0]) == len(photos) + 3
    assert warm.status().photos == len(photos) + 3

    # another process forgets a folder
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "imgtxt", "forget", str(tmp_path / "b"), "--index", str(tmp_path / "index")],
                   check=True, capture_output=True, env=env)
    after_forget = answers(warm)
    assert after_forget == fresh(tmp_path, tiny_model_dir) == first
    assert not any(str(tmp_path / "b") in path for _, _, path, _, _ in after_forget[0])

    # a rebuilt database is another file (a new inode) in the same place
    writer.index([tmp_path / "a"], rebuild=True)
    assert answers(warm) == fresh(tmp_path, tiny_model_dir)


def test_a_damaged_vector_file_is_noticed_by_an_open_library(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    copy_examples(tmp_path / "a")
    warm = Library(tmp_path / "index", model=tiny_model_dir)
    warm.index([tmp_path / "a"])
    before = answers(warm)
    assert warm.notices == []
    (vec,) = (tmp_path / "index").glob("vectors-*.vec")
    data = bytearray(vec.read_bytes())
    data[-64:] = np.full(16, 9.0, np.float32).tobytes()   # same size: only its stamp and digest tell
    vec.write_bytes(bytes(data))
    after = answers(warm, notices=True)
    assert any("damaged" in n for n in warm.notices), warm.notices
    assert after == before == fresh(tmp_path, tiny_model_dir, notices=True)   # answered exactly from SQLite, as a fresh one does


def test_each_thread_has_its_own_open_index(tmp_path, tiny_model_dir, monkeypatch):
    """The web app answers from a thread pool: an sqlite3 connection may only be used by its own thread."""
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    copy_examples(tmp_path / "a")
    lib = Library(tmp_path / "index", model=tiny_model_dir)
    lib.index([tmp_path / "a"])
    here = answers(lib)
    there = []
    worker = threading.Thread(target=lambda: there.append((answers(lib), answers(lib), id(kept(lib)))))
    worker.start()
    worker.join()
    assert there[0][0] == there[0][1] == here and there[0][2] != id(kept(lib))
    lib.close()
    assert kept(lib) is None and answers(lib) == here


def test_repeated_query_text_skips_the_encoder(tiny_model_dir):
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.model.query_cache import QueryVectors

    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.arange(3 * len(texts), dtype=np.float32).reshape(len(texts), 3) + len(calls)

    cache = QueryVectors(encode, size=2)
    a = cache(["a"])
    a[:] = -1                                       # the caller's copy; the kept one is untouched
    assert (cache(["a"]) == [[1, 2, 3]]).all() and len(calls) == 1
    cache(["b"]), cache(["c"])                      # "a" is the least recently used of three: dropped
    assert len(cache(["a"])) == 1 and len(calls) == 4
    cache(["x", "y"]), cache(["x", "y"])            # batches are never kept
    assert len(calls) == 6

    model = TrainedModel.load(tiny_model_dir)
    once = model.encode_query(["a dog on a beach"])
    assert np.array_equal(model.encode_query(["a dog on a beach"]), once)
    assert np.array_equal(model._encode_query(["a dog on a beach"]), once)


def test_one_blas_thread_for_a_query(monkeypatch):
    from threadpoolctl import threadpool_info

    from imgtxt.library.open_index import one_blas_thread

    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    with one_blas_thread():
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} == {1}


def test_concurrent_queries_give_the_blas_threads_back(monkeypatch):
    """The limit is process-wide: with two queries overlapping, the last one out restores the threads."""
    from threadpoolctl import threadpool_info

    from imgtxt.library.open_index import one_blas_thread

    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)

    def threads():
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    before = threads()
    first, second = one_blas_thread(), one_blas_thread()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)          # the first query ends while the second runs
    assert threads() == {1}
    second.__exit__(None, None, None)
    assert threads() == before
