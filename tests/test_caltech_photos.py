"""The Caltech 101 part of the mixed benchmark (bench/caltech_photos.py) on a hand-made folder, the reference photos
that calibrate-search adds (imgtxt/research/reference_photos.py), and the benchmark rating results over the
reference photos the model ships with."""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import load_bench
from PIL import Image

caltech = load_bench("caltech_photos")
mixed_library = load_bench("mixed_library")


def fake_caltech(root: Path, photos: int = 7, leave_out: str | None = None) -> Path:
    """A 101_ObjectCategories look-alike: every folder the benchmark needs, `photos` tiny JPEGs in each, named
    in an order that sorting must restore."""
    folders = {c for classes, _ in caltech.CATEGORIES.values() for c in classes} | set(caltech.NOT_IN_GALLERY)
    for name in sorted(folders - {leave_out}):
        (root / name).mkdir(parents=True)
        for i in reversed(range(1, photos + 1)):
            Image.new("RGB", (8, 8), (i * 30 % 256, 0, 0)).save(root / name / f"image_{i:04d}.jpg")
    return root


def manifest(folder: Path) -> list[list[str]]:
    with open(folder / "MANIFEST.tsv", encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t"))[1:]


def test_the_gallery_takes_the_first_three_and_the_reference_the_next_three(tmp_path):
    root = fake_caltech(tmp_path / "101_ObjectCategories")
    names = caltech.copy(root, tmp_path / "gallery", tmp_path / "reference")
    gallery, reference = manifest(tmp_path / "gallery"), manifest(tmp_path / "reference")
    assert len(gallery) == 3 * 99 and len(reference) == 3 * 102   # no background or faces in the gallery
    pizza = [row for row in gallery if row[1] == "pizza"]
    assert [row[2] for row in pizza] == ["image_0001.jpg", "image_0002.jpg", "image_0003.jpg"]
    assert [row[2] for row in reference if row[1] == "pizza"] == ["image_0004.jpg", "image_0005.jpg",
                                                                   "image_0006.jpg"]
    assert not any(row[1] in caltech.NOT_IN_GALLERY for row in gallery)
    assert {row[1] for row in reference} >= set(caltech.NOT_IN_GALLERY)
    # neutral names (a search also ranks by file-name words), the same bytes as the source
    assert names["pizza"] == [row[0] for row in pizza] and all(n.startswith("caltech-") for n in names["pizza"])
    assert (tmp_path / "gallery" / pizza[0][0]).read_bytes() == (root / "pizza" / "image_0001.jpg").read_bytes()


def test_a_folder_that_is_not_caltech_101_is_one_line(tmp_path):
    with pytest.raises(caltech.CaltechError, match="no folder pizza"):
        caltech.copy(fake_caltech(tmp_path / "c", leave_out="pizza"), tmp_path / "g", tmp_path / "r")
    with pytest.raises(caltech.CaltechError, match="fewer than 6 photos"):
        caltech.copy(fake_caltech(tmp_path / "d", photos=5), tmp_path / "g2", tmp_path / "r2")
    with pytest.raises(caltech.CaltechError, match="not a folder"):
        caltech.folders(tmp_path / "missing")


def test_queries_name_the_category_photos_and_the_flickr_photos_whose_captions_say_it():
    gallery = {c: [f"{c}-{i}.jpg" for i in range(3)] for classes, _ in caltech.CATEGORIES.values() for c in classes}
    captions = ["A man eats a slice of pizza .", "A dog runs .", "Two dogs play .", "A boy holds pizzas .",
                "A sailboat on the sea .", "a stop sign by a road ."]
    photos = ["a.jpg", "b.jpg", "c.jpg"]   # two captions each
    rows = {(q, kind): right for q, right, kind in caltech.query_rows(gallery, captions, photos, 2)}
    assert rows[("a pizza", "object")] == ["pizza-0.jpg", "pizza-1.jpg", "pizza-2.jpg", "a.jpg"]   # not "pizzas"
    assert rows[("a photo of a pizza", "photo-of")] == rows[("a pizza", "object")]
    assert rows[("a sailboat", "object")] == ["ketch-0.jpg", "ketch-1.jpg", "ketch-2.jpg", "schooner-0.jpg",
                                              "schooner-1.jpg", "schooner-2.jpg", "c.jpg"]
    assert rows[("a stop sign", "object")][-1] == "c.jpg"    # words in a row
    assert len(rows) == 2 * len(caltech.CATEGORIES)
    assert caltech.dev_also("a photo of a cat", gallery) == ["wild_cat-0.jpg", "wild_cat-1.jpg", "wild_cat-2.jpg"]
    assert caltech.dev_also("a quokka", gallery) == []


def test_reference_photos_append_the_folder_in_name_order_and_are_cached(tmp_path, monkeypatch):
    from imgtxt.research import reference_photos

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    train = [tmp_path / f"t{i}.jpg" for i in range(12)]
    monkeypatch.setattr(reference_photos, "load_split", lambda *a: SimpleNamespace(image_paths=train))
    calls = []

    def embed(model, paths, desc, quiet=False):
        calls.append([p.name for p in paths])
        return np.array([[float(p.stem[1:]), 1.0] for p in paths], np.float32)

    monkeypatch.setattr(reference_photos, "embed_photos", embed)
    more = tmp_path / "more"
    more.mkdir()
    for name in ("m9.png", "m3.jpg", "notes.txt"):
        (more / name).write_bytes(b"x")
    model = SimpleNamespace(model_id="m", vector_dim=2)
    plain = reference_photos.reference_vectors(model, "flickr8k", tmp_path, True)
    assert plain[:, 0].tolist() == [0.0, 6.0]                       # one training photo in 6
    both = reference_photos.reference_vectors(model, "flickr8k", tmp_path, True, more)
    assert both[:, 0].tolist() == [0.0, 6.0, 3.0, 9.0]              # then the folder's photos, by name
    assert calls == [["t0.jpg", "t6.jpg"], ["m3.jpg", "m9.png"]]    # the training photos came from the cache
    (more / "m3.jpg").write_bytes(b"another photo")                # same name, other photo: not the cached row
    reference_photos.reference_vectors(model, "flickr8k", tmp_path, True, more)
    assert calls[-1] == ["m3.jpg", "m9.png"] and len(calls) == 3
    assert reference_photos.describe("flickr8k", more) == "flickr8k train photos, one in 6, and 2 photos of more/"
    with pytest.raises(ValueError, match="holds no photos"):
        reference_photos.photo_files(tmp_path / "cache")


def test_calibrate_search_refuses_a_reference_folder_without_photos_in_one_line(tmp_path):
    from click.testing import CliRunner

    from imgtxt.cli.main import app

    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["calibrate-search", "--data-dir", str(tmp_path), "--reference-photos",
                                      str(tmp_path / "empty"), "--dry-run"])
    assert result.exit_code == 2 and "holds no photos" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_the_benchmark_rates_over_the_reference_photos_the_model_ships(monkeypatch):
    """Not the training photos alone: a model whose reference holds other photos is rated as its searches are."""
    from imgtxt.model.calibration import Calibration
    from imgtxt.model.search_confidence import SearchConfidence
    from imgtxt.research import search_confidence_fit as fitting

    shipped = np.eye(3, dtype=np.float32)
    per_query = SearchConfidence(Calibration(1.0, 0.0, 0.9, 0.5), shipped, rank=1)
    model = SimpleNamespace(_search_confidence=(per_query, []))
    seen = {}

    def build(model, dataset, data_dir, reference, *args, **kwargs):
        seen["reference"] = reference
        return fitting.Benchmark(np.zeros((1, 1)), np.zeros(1), [frozenset()], ["caption"], 1,
                                 np.ones((1, 1)), np.zeros(1))

    monkeypatch.setattr(fitting, "build", build)
    bench, calibration, rated_by = mixed_library.rated_bench(model, "data", Path("p"), Path("q"))
    assert seen["reference"] is shipped and calibration is per_query.calibration
    assert rated_by == "per-query search confidence" and bench.baselines.tolist() == [1.0]


def test_the_training_set_adds_other_photos_of_half_the_categories(tmp_path):
    import json

    from imgtxt.research.datasets import load_split

    training_set = load_bench("caltech_training_set")
    root = fake_caltech(tmp_path / "101_ObjectCategories", photos=9)
    flickr = tmp_path / "flickr8k"
    (flickr / "images").mkdir(parents=True)
    entries = []
    for i, split in enumerate(["train", "train", "val"]):
        Image.new("RGB", (8, 8)).save(flickr / "images" / f"{i}.jpg")
        entries.append({"filename": f"{i}.jpg", "split": split, "sentences": [{"raw": f"a dog {j}"} for j in range(5)]})
    (flickr / "dataset_flickr8k.json").write_text(json.dumps({"images": entries}))
    summary = training_set.build(flickr, root, tmp_path / "out", per_category=2)
    seen = list(caltech.CATEGORIES)[::2]
    assert training_set.seen_categories("half") == seen and "a panda" not in seen and "a pagoda" in seen
    folders = [f for q in seen for f in caltech.CATEGORIES[q][0]]
    assert summary == {"caltech_photos": 2 * len(folders), "categories": len(seen), "flickr8k_train": 2}
    train = load_split("flickr8k", tmp_path / "out", "train")
    # photos 7 and 8 of each seen folder: the benchmark's first six are never trained on
    pagoda = [p for p in train.image_paths if p.parent.name == "pagoda"]
    assert [p.name for p in pagoda] == ["image_0007.jpg", "image_0008.jpg"]
    assert not any(p.parent.name == "panda" for p in train.image_paths)
    i = train.image_paths.index(pagoda[0])
    assert train.captions[5 * i:5 * i + 2] == ["a pagoda.", "a photo of a pagoda."]
    assert train.groups[:2] == ["", ""] and train.groups[i] == train.groups[i + 1] == "caltech:a pagoda"
    assert len(load_split("flickr8k", tmp_path / "out", "val")) == 1     # val untouched


def test_the_benchmark_can_tell_trained_categories_from_the_others():
    rows = len(caltech.CATEGORIES)
    kinds = ["caption", "object"] + ["object", "photo-of"] * rows

    @dataclasses.dataclass
    class Bench:
        kinds: list

    split = mixed_library.split_seen(Bench(kinds), ["an accordion", "an anchor"])
    assert split.kinds[:6] == ["caption", "object", "object seen", "photo-of seen", "object unseen",
                               "photo-of unseen"]
    assert split.kinds[6:8] == ["object seen", "photo-of seen"]          # an anchor, the third category
    assert split.kinds.count("object unseen") == rows - 2
    with pytest.raises(mixed_library.object_devset.DevSetError, match="--caltech"):
        mixed_library.split_seen(Bench(["caption"] * (2 * rows)), [])
