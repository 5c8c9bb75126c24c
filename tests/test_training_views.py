"""Training views: each training photo also seen mirrored and zoomed in, one view drawn per pair and epoch."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from imgtxt.research.feature_cache import FeatureSpec
from imgtxt.research.views import VIEWS, apply_view, batch_rows, parse_views


def _square():
    """10x10: a white 1-px frame around black, and the left half of the inside red."""
    s = np.full((10, 10, 3), 255, np.uint8)
    s[1:9, 1:9] = 0
    s[1:9, 1:5, 0] = 200
    return s[None]


def test_mirror_flips_left_and_right_and_zoom_drops_the_frame():
    s = _square()
    mirrored = apply_view("mirror", s)
    assert (mirrored[0] == s[0, :, ::-1]).all()
    assert mirrored[0, 4, 2, 0] == 0 and mirrored[0, 4, 7, 0] == 200
    zoomed = apply_view("zoom", s)
    # 80% of 10 px is the central 8: the white frame is gone, the red half fills the left half
    assert zoomed.shape == s.shape and zoomed.dtype == np.uint8
    assert zoomed[0, :, :, 1:].max() == 0
    assert (zoomed[0, :, :4, 0] == 200).all() and (zoomed[0, :, 6:, 0] == 0).all()
    both = apply_view("zoom-mirror", s)
    assert (both[0] == zoomed[0, :, ::-1]).all()
    with pytest.raises(ValueError, match="mirror, zoom, zoom-mirror"):
        apply_view("rotate", s)


def test_views_are_parsed_once_each_in_a_fixed_order():
    assert parse_views("zoom, mirror,zoom") == ("mirror", "zoom")
    assert parse_views("") == () and parse_views(",".join(VIEWS)) == VIEWS
    with pytest.raises(ValueError, match="unknown training view 'flip'"):
        parse_views("mirror,flip")


def test_a_batch_takes_each_row_from_the_view_drawn_for_it():
    centre = np.arange(6)[:, None] * np.ones((1, 2))              # row i holds i
    views = (centre + 100, centre + 200)                           # view k adds 100 k
    images = np.array([5, 0, 3, 3, 1])
    rng = np.random.default_rng(7)
    drawn = np.random.default_rng(7).integers(0, 3, len(images))   # the same draws: 0 = centre, 1-2 = the views
    rows = batch_rows(centre, views, images, rng)
    assert rows[:, 0].tolist() == (images + 100 * drawn).tolist()
    assert len(set(drawn.tolist())) > 1                            # the seed draws more than one source
    # without views the centre rows are taken and nothing is drawn: a run without views keeps its seeds' batches
    rng = np.random.default_rng(7)
    before = rng.bit_generator.state
    assert batch_rows(centre, (), images, rng)[:, 0].tolist() == images.tolist()
    assert rng.bit_generator.state == before


def test_a_views_features_are_cached_apart_and_computed_through_it(tmp_path, monkeypatch):
    from imgtxt.research.datasets import load_split
    from imgtxt.research.pipeline import raw_split_features

    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "data"
    (folder / "images").mkdir(parents=True)
    entries = []
    for i in range(3):
        picture = np.zeros((10, 10, 3), np.uint8)
        picture[:, :5] = 40 * (i + 1)                              # left half grey, right half black
        Image.fromarray(picture).save(folder / "images" / f"{i}.png")
        entries.append({"filename": f"{i}.png", "split": "train", "sentences": [{"raw": f"c {i} {j}"} for j in range(5)]})
    (folder / "dataset_flickr8k.json").write_text(json.dumps({"images": entries}))
    split = load_split("flickr8k", folder, "train")
    # a stand-in extractor: the mean of the left column of the square it is given
    extractor = SimpleNamespace(backbone=SimpleNamespace(id="stand-in@0"), dim=1, resize_size=10,
                                layer_names=["x"], layer_dims=[1], baseline_slice=(0, 1))
    calls = []

    class StandIn:
        def __getattr__(self, name):
            return getattr(extractor, name)

        def __call__(self, squares):
            calls.append(len(squares))
            return squares[:, :, 0, :1].mean(axis=1).astype(np.float32)

    settings = SimpleNamespace(layer_set="all", crops=1, precision="fp32", runtime="torch")
    centre, _ = raw_split_features(split, settings, extractor=StandIn(), quiet=True)
    mirrored, _ = raw_split_features(split, settings, extractor=StandIn(), quiet=True, view="mirror")
    assert centre[:, 0].tolist() == [40, 80, 120] and mirrored[:, 0].tolist() == [0, 0, 0]
    assert len(calls) == 2
    # both are cached under their own keys: asked again, neither is recomputed
    again, _ = raw_split_features(split, settings, extractor=StandIn(), quiet=True, view="mirror")
    assert again[:, 0].tolist() == [0, 0, 0] and len(calls) == 2
    plain = FeatureSpec("stand-in@0", "all", 1, "fp32")
    mirror = FeatureSpec("stand-in@0", "all", 1, "fp32", view="mirror")
    assert mirror.key != plain.key and "-mirror-" in mirror.key and "mirror" not in plain.key


def test_training_draws_its_batches_from_the_views(tmp_path, monkeypatch):
    from test_seed_math import _bow_data

    from imgtxt.research import train as train_module
    from imgtxt.research.presets import Phase, TrainConfig

    seen = []
    real = train_module.batch_rows
    monkeypatch.setattr(train_module, "batch_rows", lambda c, v, i, r: seen.append(real(c, v, i, r)) or seen[-1])
    data = _bow_data()
    data.train_views = (np.zeros_like(data.train_features),)        # a view whose rows are all zero
    cfg = TrainConfig([Phase("max", 1e-3)], embed_dim=16, batch_size=len(data.train_features), max_epochs=1,
                      patience=9)
    train_module.train(tmp_path / "run", data, cfg)
    rows = np.concatenate(seen)
    zero = (rows == 0).all(axis=1)
    assert 0 < zero.sum() < len(rows)          # some rows from the view, the rest from the centre crop
