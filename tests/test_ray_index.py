"""`imgtxt index --ray`: embedding sharded over Ray actors gives the single-process vectors, in one store."""
import re
import sqlite3

import numpy as np
import pytest
from conftest import write_photo

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]'; the test extra has it)")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # two 1-CPU workers on this machine
    yield
    ray.shutdown()


def _vectors(index_dir) -> dict:
    with sqlite3.connect(index_dir / "index.db") as db:
        return {path: (np.frombuffer(blob, np.float16).astype(np.float32), w, h)
                for path, blob, w, h in db.execute("SELECT path, embedding, width, height FROM photos")}


def _untimed(summary: dict) -> dict:
    """The summary without the vector build's seconds ("... (0.1 s)"), which differ run to run."""
    return {**summary, "vector_index": re.sub(r" \([0-9.]+ s\)$", "", summary["vector_index"])}


def test_ray_vectors_equal_single_process(tmp_path, tiny_model, local_ray):
    from imgtxt.library.indexer import run_index

    photos = tmp_path / "photos"
    for i in range(5):
        write_photo(photos / f"p{i}.jpg", seed=i, size=(320 + 16 * i, 240))
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    local = run_index(tmp_path / "local", [str(photos)], tiny_model, batch_size=2, log=lambda m: None)
    sharded = run_index(tmp_path / "ray", [str(photos)], tiny_model, batch_size=2, log=lambda m: None,
                        ray_address="local")
    assert _untimed(sharded.as_dict()) == _untimed(local.as_dict())
    assert sharded.embedded == 5 and len(sharded.skipped) == 1
    a, b = _vectors(tmp_path / "local"), _vectors(tmp_path / "ray")
    assert a.keys() == b.keys() and len(a) == 5
    for path in a:
        # the same numbers up to float32 rounding (other processes sum in another order: ~1e-8 apart)
        np.testing.assert_allclose(a[path][0], b[path][0], rtol=0, atol=1e-6)
        assert a[path][1:] == b[path][1:]          # true width and height
    # incremental: a rerun on Ray embeds nothing; a new photo is the only one embedded
    write_photo(photos / "p9.jpg", seed=9)
    again = run_index(tmp_path / "ray", [str(photos)], tiny_model, batch_size=2, log=lambda m: None,
                      ray_address="local")
    assert (again.embedded, again.added, again.unchanged) == (1, 1, 5)


@pytest.mark.parametrize("which", ["tiny GRU", "shipped MiniLM"])
def test_the_workers_get_every_file_the_model_needs(tmp_path, tiny_model, which):
    """Workers rebuild the model folder from what the driver sends (the MiniLM kind needs tokenizer.json)."""
    from imgtxt.library.ray_index import folder_files
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.paths import default_model_dir

    model = tiny_model if which == "tiny GRU" else TrainedModel.load(default_model_dir())
    for name, data in folder_files(model).items():
        (tmp_path / name).write_bytes(data)
    rebuilt = TrainedModel.load(tmp_path)
    queries = ["a dog runs on the beach", "two children"]
    np.testing.assert_array_equal(rebuilt.encode_text(queries), model.encode_text(queries))


def test_a_failing_worker_is_one_line_and_keeps_what_was_saved(tmp_path, tiny_model, local_ray, monkeypatch):
    from imgtxt.library import ray_index
    from imgtxt.library.indexer import run_index

    photos = tmp_path / "photos"
    for i in range(3):
        write_photo(photos / f"p{i}.jpg", seed=i)
    real = ray_index.model_files
    monkeypatch.setattr(ray_index, "model_files", lambda model: {k: v for k, v in real(model).items()
                                                                  if k != "model.json"})
    with pytest.raises(ray_index.ClusterError) as failed:
        run_index(tmp_path / "ray", [str(photos)], tiny_model, batch_size=2, log=lambda m: None,
                  ray_address="local")
    message = str(failed.value)
    assert "\n" not in message and message.startswith("a Ray worker failed: ") and "model.json" in message, message
