"""The experiment protocol: Table 1 presets per dataset, vocabulary options, COCO train without restval."""
import json

import numpy as np
import pytest

from imgtxt.model.vocab import Vocabulary
from imgtxt.research.datasets import load_split, restval_mask
from imgtxt.research.pipeline import without_restval
from imgtxt.research.train import PRESET_NAMES, preset


def test_every_table1_column_has_a_preset_per_dataset():
    assert set(PRESET_NAMES) == {"SH", "SH-BL", "MH", "MH-BL", "SOE", "SOE-BL", "MOE", "MOE-BL", "PH", "POE"}
    # embed. dim. row of Table 1, f8k / f30k / coco
    expected = {"SH": (1536, 1536, 1536), "SH-BL": (2048, 2048, 2048), "MH": (1024, 1536, 2048),
                "MH-BL": (1024, 1024, 1024), "SOE": (1024, 1024, 1536), "MOE": (1536, 1536, 2048),
                "PH": (1536, 1536, 1536), "POE": (1024, 1024, 2048)}
    for name, dims in expected.items():
        assert tuple(preset(name, d).embed_dim for d in ("flickr8k", "flickr30k", "coco")) == dims, name


def test_flickr30k_mh_uses_flickr30k_sizes_and_overrides_win():
    assert preset("MH", "flickr30k").embed_dim == 1536
    assert preset("mh", "flickr30k", embed_dim=512).embed_dim == 512
    cfg = preset("MH", "flickr8k", margin=0.1, similarity="order", use_abs=True, batch_size=64)
    assert (cfg.margin, cfg.similarity, cfg.use_abs, cfg.batch_size) == (0.1, "order", True, 64)
    assert preset("MH", "flickr8k").max_epochs == 400 and preset("MH", "coco").max_epochs == 200


def test_baseline_rows_and_footnotes():
    sh_bl = preset("SH-bl", "coco")
    assert (sh_bl.word_dim, sh_bl.phases[0].lr) == (2000, 2.5e-4)          # footnote a
    assert preset("SH-bl", "flickr8k").word_dim == 1000
    moe_bl = preset("MOE-bl")
    assert (moe_bl.similarity, moe_bl.margin, moe_bl.use_abs, moe_bl.word_dim) == ("order", 0.2, False, 300)
    poe = preset("POE", "coco")
    assert [(p.loss, p.lr) for p in poe.phases] == [("sum", 1e-3), ("max", 1e-4)] and poe.use_abs
    with pytest.raises(ValueError, match="unknown preset"):
        preset("XX")


def test_vocabulary_top_k():
    caps = ["a dog", "a dog runs", "a cat", "the bird"]
    assert Vocabulary.build(caps, min_count=1, max_words=2).words[2:] == ["a", "dog"]
    assert len(Vocabulary.build(caps, min_count=1)) == 2 + 6


def test_coco_train_without_restval(tmp_path):
    images = []
    for i, split in enumerate(["train", "restval", "val", "train", "restval"]):
        images.append({"filename": f"{i}.jpg", "filepath": "x", "split": split,
                       "sentences": [{"raw": f"img {i} cap {j}"} for j in range(5)]})
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": images}))
    train = load_split("coco", tmp_path, "train", check_images=False)
    assert len(train) == 4 and restval_mask("coco", tmp_path) == [False, True, False, True]
    raw = np.arange(4)[:, None] * np.ones((4, 3), np.float32)
    paper, rows = without_restval(train, raw, tmp_path)
    assert [p.name for p in paper.image_paths] == ["0.jpg", "3.jpg"]
    assert paper.captions[5] == "img 3 cap 0" and len(paper.captions) == 10
    assert rows[:, 0].tolist() == [0, 2]
