"""Karpathy-format loaders on small synthetic copies, the feature cache, and `imgtxt eval` end to end."""
import json

import numpy as np
import pytest
from conftest import write_photo

from imgtxt.research.datasets import DatasetError, load_split
from imgtxt.research.metrics import evaluate_scores


def make_dataset(root, name, splits, folder, captions=5, filepath=None):
    images = []
    k = 0
    for split, n in splits.items():
        for i in range(n):
            fn = f"{split}{i}.jpg"
            write_photo(root / (filepath or folder) / fn, seed=k, size=(64, 48))
            entry = {"filename": fn, "split": split, "imgid": k,
                     "sentences": [{"raw": f"photo {k} number {j} of a {split} scene"} for j in range(captions)]}
            if filepath:
                entry["filepath"] = filepath
            images.append(entry)
            k += 1
    (root / f"dataset_{name}.json").write_text(json.dumps({"dataset": name, "images": images}))
    return root


def test_flickr30k_layout(tmp_path):
    make_dataset(tmp_path, "flickr30k", {"train": 3, "val": 2, "test": 4}, "flickr30k-images")
    test = load_split("flickr30k", tmp_path, "test")
    assert len(test) == 4 and len(test.captions) == 20
    assert test.image_paths[0].parent.name == "flickr30k-images"
    assert test.captions[5].startswith("photo 6 ")  # image-major order, five per image


def test_coco_restval_joins_train_and_extra_captions_are_dropped(tmp_path):
    make_dataset(tmp_path, "coco", {"train": 2, "restval": 3, "val": 1}, None, captions=7, filepath="val2014")
    train = load_split("coco", tmp_path, "train")
    assert len(train) == 5 and len(train.captions) == 25
    assert train.image_paths[0].parent.name == "val2014"


def test_malformed_and_missing_datasets_are_clear_errors(tmp_path):
    with pytest.raises(DatasetError, match="no such folder"):
        load_split("flickr8k", tmp_path / "nope", "val")
    with pytest.raises(DatasetError, match="dataset_flickr8k.json"):
        load_split("flickr8k", tmp_path, "val")
    (tmp_path / "dataset_flickr8k.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not a Karpathy-format"):
        load_split("flickr8k", tmp_path, "val")
    make_dataset(tmp_path, "flickr8k", {"train": 2}, "images", captions=3)
    with pytest.raises(DatasetError, match="has 3 captions"):
        load_split("flickr8k", tmp_path, "train")
    make_dataset(tmp_path, "flickr8k", {"train": 2}, "images")
    with pytest.raises(DatasetError, match="split 'test' is empty"):
        load_split("flickr8k", tmp_path, "test")
    (tmp_path / "images" / "train1.jpg").unlink()
    with pytest.raises(DatasetError, match="1 of 2 train images are missing"):
        load_split("flickr8k", tmp_path, "train")


def test_feature_cache_resumes_and_is_keyed_by_settings(tmp_path, monkeypatch, facts):
    from imgtxt.research.feature_cache import (
        FeatureSpec,
        cached_features,
        compute_features,
    )
    from imgtxt.research.pipeline import FeatureSettings, open_extractor

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    make_dataset(tmp_path, "flickr8k", {"val": 5}, "images")
    split = load_split("flickr8k", tmp_path, "val")
    ex = open_extractor(FeatureSettings(layer_set="blocks", crops=1))
    spec = FeatureSpec(ex.backbone.id, "blocks", 1, "auto")
    assert cached_features("flickr8k", split, spec) is None
    full = np.array(compute_features("flickr8k", split, ex, spec, batch_size=2, quiet=True))
    assert cached_features("flickr8k", split, spec) is not None
    # simulate an interruption after the first batch: rows beyond it are garbage, the counter says 2
    meta_path = tmp_path / "cache" / "flickr8k" / spec.key / "val.json"
    meta = json.loads(meta_path.read_text())
    meta["done"] = 2
    meta_path.write_text(json.dumps(meta))
    rows = np.load(meta_path.with_suffix(".npy"), mmap_mode="r+")
    rows[2:] = -1.0
    rows.flush()
    assert cached_features("flickr8k", split, spec) is None
    again = np.array(compute_features("flickr8k", split, ex, spec, batch_size=2, quiet=True))
    np.testing.assert_allclose(again, full, rtol=1e-5, atol=1e-5)
    other = FeatureSpec(ex.backbone.id, "blocks", 10, "auto")
    assert other.key != spec.key and cached_features("flickr8k", split, other) is None
    assert FeatureSpec(ex.backbone.id, "all", 1, "auto").key != spec.key


def test_features_print_progress_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    """`imgtxt eval` piped into a log: tqdm shows nothing there, so a line every PIPED_EVERY seconds."""
    from imgtxt.research import feature_cache

    class Extractor:   # the extractor's contract, without a CNN
        dim, layer_names, layer_dims, baseline_slice, resize_size = 4, ["a"], [4], [0, 4], 32

        def __call__(self, squares):
            return np.ones((len(squares), 4), np.float32)

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(feature_cache, "PIPED_EVERY", 0.0)
    make_dataset(tmp_path, "flickr8k", {"val": 5}, "images")
    split = load_split("flickr8k", tmp_path, "val")
    spec = feature_cache.FeatureSpec("stand-in@x", "all", 1, "fp32")
    feature_cache.compute_features("flickr8k", split, Extractor(), spec, batch_size=2)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" photos")[0] for line in lines if line.startswith("imgtxt:")] == [
        f"imgtxt: flickr8k val features: {done}/5" for done in (2, 4, 5)]
    feature_cache.compute_features("flickr8k", split, Extractor(), spec, batch_size=2, quiet=True)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("dataset, images", [("flickr30k", "flickr30k-images/"), ("coco", "val2014/"),
                                             ("flickr8k", "Flicker8k_Dataset/")])
def test_missing_data_says_what_the_folder_must_hold(tmp_path, dataset, images):
    for reason in ("no such folder", "Karpathy split file"):
        folder = tmp_path / "absent" if reason == "no such folder" else tmp_path
        with pytest.raises(DatasetError) as found:
            load_split(dataset, folder, "test")
        message = str(found.value)
        assert reason in message and "\n" not in message
        assert f"dataset_{dataset}.json" in message and "caption_datasets.zip" in message and images in message


def test_eval_cli_json_and_saved_embeddings(tmp_path, library, tiny_model):
    data = make_dataset(tmp_path / "f30k", "flickr30k", {"train": 1, "test": 6}, "flickr30k-images")
    emb = tmp_path / "emb"
    result = library.run("eval", "flickr30k", "--data-dir", data, "--split", "test", "--model", library.model,
                         "--json", "--save-embeddings", emb)
    out = json.loads(result.stdout)
    assert set(out) == {"dataset", "split", "images", "captions", "i2t", "t2i", "rsum"}
    assert (out["dataset"], out["split"], out["images"], out["captions"]) == ("flickr30k", "test", 6, 30)
    assert set(out["i2t"]) == {"r1", "r5", "r10", "medr", "meanr"}
    images, captions = np.load(emb / "images.npy"), np.load(emb / "captions.npy")
    assert images.shape[0] == 6 and captions.shape[0] == 30
    expected = evaluate_scores(tiny_model.scores(images, captions))
    assert out["rsum"] == pytest.approx(expected["rsum"])
    assert out["t2i"] == pytest.approx(expected["t2i"])


def test_eval_runs_the_photos_through_the_index_path_by_default(tmp_path, library):
    """`imgtxt eval`'s photo vectors are the ones `imgtxt index` stores for the same files (the same graph and
    runtime); --runtime torch computes them in torch."""
    import sqlite3

    data = make_dataset(tmp_path / "f30k", "flickr30k", {"test": 6}, "flickr30k-images")
    vectors = {}
    for runtime in ("index", "torch"):
        library.run("eval", "flickr30k", "--data-dir", data, "--split", "test", "--model", library.model, "--json",
                    "--save-embeddings", tmp_path / runtime, "--runtime", runtime)
        vectors[runtime] = np.load(tmp_path / runtime / "images.npy")
    library.run("index", data / "flickr30k-images", "-q")
    conn = sqlite3.connect(library.index / "index.db")
    stored = dict(conn.execute("SELECT path, embedding FROM photos").fetchall())
    conn.close()
    indexed = np.stack([np.frombuffer(stored[str(data / "flickr30k-images" / f"test{i}.jpg")], np.float16)
                        for i in range(6)]).astype(np.float32)
    np.testing.assert_allclose(vectors["index"], indexed, atol=2e-3)     # float16 as stored
    # torch computes the model's own precision (the tiny model: bf16 autocast), the graph fp32: close, not equal;
    # each photo's torch vector is still nearest its own graph vector
    unit = {k: v / np.linalg.norm(v, axis=1, keepdims=True) for k, v in vectors.items()}
    assert (np.argmax(unit["torch"] @ unit["index"].T, axis=1) == np.arange(6)).all()
    assert library.run("eval", "flickr30k", "--data-dir", data, "--runtime", "gpu", ok=False).exit_code != 0


def test_cli_errors_for_missing_data(tmp_path, library):
    r = library.run("eval", "flickr8k", "--data-dir", tmp_path / "nowhere", ok=False)
    assert r.exit_code != 0 and "no such folder" in r.stderr
    r = library.run("eval", "imagenet", "--data-dir", tmp_path, ok=False)
    assert r.exit_code != 0 and "unknown dataset" in r.stderr
