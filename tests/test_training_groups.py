"""Photos of one group (one object category, captioned alike) are never each other's negatives in training."""
import json

import numpy as np
import torch

from imgtxt.research.datasets import load_split
from imgtxt.research.pipeline import group_ids
from imgtxt.research.train import matching_pairs


def _dataset(folder, groups):
    (folder / "images").mkdir(parents=True)
    entries = []
    for i, group in enumerate(groups):
        (folder / "images" / f"{i}.jpg").write_bytes(b"x")
        entry = {"filename": f"{i}.jpg", "split": "train", "sentences": [{"raw": f"caption {i} {j}"} for j in range(5)]}
        if group is not None:
            entry["group"] = group
        entries.append(entry)
    (folder / "dataset_flickr8k.json").write_text(json.dumps({"images": entries}))
    return folder


def test_a_dataset_entry_may_name_its_group(tmp_path):
    split = load_split("flickr8k", _dataset(tmp_path / "a", [None, "cup", None, "cup", "pizza"]), "train")
    assert split.groups == ["", "cup", "", "cup", "pizza"]
    ids = group_ids(split.groups)
    # the two cups share an id; every other image has one of its own
    assert ids[1] == ids[3] and len(set(ids.tolist())) == 4
    assert load_split("flickr8k", _dataset(tmp_path / "b", [None, None]), "train").groups is None
    assert group_ids(None) is None


def test_a_group_makes_its_images_match_each_other_in_a_batch():
    groups = np.array([0, 1, 0, 2])                      # images 0 and 2 are one category
    batch_images = np.array([0, 2, 1, 0])                # image 0 twice (two of its captions), then 2 and 1
    mask = matching_pairs(batch_images, groups, "all")
    assert mask.tolist() == [[True, True, False, True],
                             [True, True, False, True],
                             [False, False, True, False],
                             [True, True, False, True]]
    # without groups: the same image's captions only, and nothing with one caption per image
    assert matching_pairs(batch_images, None, "all").tolist() == [[True, False, False, True],
                                                                 [False, True, False, False],
                                                                 [False, False, True, False],
                                                                 [True, False, False, True]]
    assert matching_pairs(batch_images, None, "one") is None


def test_training_passes_the_groups_to_the_loss(tmp_path, monkeypatch):
    from test_seed_math import _bow_data

    from imgtxt.research import train as train_module
    from imgtxt.research.presets import Phase, TrainConfig

    masks = []
    real_loss = train_module.training_loss
    monkeypatch.setattr(train_module, "training_loss", lambda s, k, c, also, p: masks.append(also) or
                        real_loss(s, k, c, also, p))
    data = _bow_data()
    n = len(data.train_features)
    data.train_groups = np.arange(n) // 8               # 8 images a group
    cfg = TrainConfig([Phase("max", 1e-3)], embed_dim=16, batch_size=n, max_epochs=1, patience=9)
    train_module.train(tmp_path / "run", data, cfg)
    # one caption per image, all in one batch: each row matches exactly the 8 images of its group
    assert len(masks) == 1 and masks[0].dtype == torch.bool
    assert masks[0].sum(dim=1).tolist() == [8] * n and (masks[0] == masks[0].t()).all()


def test_coco_without_restval_keeps_each_images_group(tmp_path):
    from imgtxt.research.pipeline import without_restval

    folder = _dataset(tmp_path / "c", ["cup", None, "cup"])
    doc = json.loads((folder / "dataset_flickr8k.json").read_text())
    doc["images"][1]["split"] = "restval"
    (folder / "dataset_coco.json").write_text(json.dumps(doc))
    split = load_split("coco", folder, "train")
    kept, raw = without_restval(split, np.arange(3)[:, None], folder)
    assert kept.groups == ["cup", "cup"] and raw[:, 0].tolist() == [0, 2]
