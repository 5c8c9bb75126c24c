"""The model id covers every model.json setting that changes a photo's vector (crops, precision, use_abs, the ConSE
weights, the text settings under the hubness correction), so an index built with one setting is re-embedded, never
extended or searched, with another; and the id of a model with the settings it was saved with stays what it was
before settings entered the id (the shipped model's above all: changing it would re-embed every index)."""
from __future__ import annotations

import copy
import json
import sqlite3

import numpy as np
import pytest
from conftest import write_photo
from test_hostile_models import edit_json, model_copy

from imgtxt.model import model_id as identity
from imgtxt.model.modelfile import TrainedModel
from imgtxt.paths import default_model_dir

SHIPPED_ID = "fne-lite1-minilm-ft3-mlp-conse-caltech-9d5f18e150b1"   # the id every index of the shipped model records


def shipped_config() -> dict:
    return json.loads((default_model_dir() / "model.json").read_text())


def test_the_shipped_model_keeps_its_id(tmp_path, monkeypatch):
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    model = TrainedModel.load(default_model_dir())
    assert model.model_id == SHIPPED_ID
    assert model.config["calibration"]["fitted_on"]["model_id"] == SHIPPED_ID   # what its calibration was fit on


PHOTO_EDITS = {
    "features.crops": lambda c: c["features"].update(crops=10),
    "features.precision": lambda c: c["features"].update(precision="bf16"),
    "joint.use_abs": lambda c: c["joint"].update(use_abs=True),
    "joint.image_bias": lambda c: c["joint"].update(image_bias=True),
    "concepts.weight": lambda c: c["concepts"].update(weight=0.5),
    "concepts.confidence_weight": lambda c: c["concepts"].update(confidence_weight=0.1),
    "concepts.top_k": lambda c: c["concepts"].update(top_k=5),
    "text (under the hubness correction)": lambda c: c["text"].update(max_length=64),
}


@pytest.mark.parametrize("setting", PHOTO_EDITS)
def test_each_photo_setting_changes_the_model_id(setting):
    config = shipped_config()
    digest = config["weights_sha256"]
    assert identity.model_id(config, "m", digest) == identity.model_id(copy.deepcopy(config), "m", digest)
    edited = copy.deepcopy(config)
    PHOTO_EDITS[setting](edited)
    assert identity.model_id(edited, "m", digest) != identity.model_id(config, "m", digest)
    unstamped = {k: v for k, v in edited.items() if k != identity.RECORD_KEY}   # a model saved before the record
    assert identity.model_id(unstamped, "m", digest) != identity.model_id(config, "m", digest)


def test_a_model_without_the_record_keeps_its_id_at_the_defaults(tiny_model_dir):
    config = json.loads((tiny_model_dir / "model.json").read_text())   # imgtxt train's defaults
    digest, legacy = config["weights_sha256"], f"m-{config['weights_sha256'][:12]}"
    unstamped = {k: v for k, v in config.items() if k != identity.RECORD_KEY}
    assert identity.model_id(config, "m", digest) == identity.model_id(unstamped, "m", digest) == legacy
    for setting in ("features.crops", "features.precision", "joint.use_abs", "joint.image_bias"):
        edited = copy.deepcopy(unstamped)
        PHOTO_EDITS[setting](edited)
        assert identity.model_id(edited, "m", digest) != legacy, setting
    assert identity.model_id({**config, identity.RECORD_KEY: "0" * 64}, "m", digest) != legacy


def test_an_edited_copy_of_the_shipped_model_is_another_model(tmp_path, monkeypatch):
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    edited = model_copy(default_model_dir(), tmp_path / "edited")
    edit_json(edited, lambda c: c["features"].update(crops=10))
    model = TrainedModel.load(edited)
    assert model.model_id.startswith("fne-lite1-minilm-ft3-mlp-conse-caltech-") and model.model_id != SHIPPED_ID


def stored(library) -> dict:
    conn = sqlite3.connect(library.index / "index.db")
    rows = {p: (m, np.frombuffer(e, np.float16)) for p, m, e in conn.execute("SELECT path, model_id, embedding "
                                                                              "FROM photos")}
    conn.close()
    return rows


def test_indexing_with_a_changed_photo_setting_re_embeds_and_search_refuses_the_mix(library, tmp_path, tiny_model_dir):
    for i in range(3):
        write_photo(tmp_path / "p" / f"{i}.jpg", seed=i)
    library.run("index", tmp_path / "p", "-q")
    before = stored(library)
    edited = tmp_path / "abs-model"
    model_copy(tiny_model_dir, edited)
    edit_json(edited, lambda c: c["joint"].update(use_abs=True))
    edited_id = TrainedModel.load(edited).model_id

    result = library.run("index", tmp_path / "p", "--json", "--model", edited)
    summary = json.loads(result.stdout)
    assert "another model" in result.stderr and (summary["embedded"], summary["indexed"]) == (3, 3)
    after = stored(library)
    assert {m for m, _ in after.values()} == {edited_id} != {m for m, _ in before.values()}
    assert all((v >= 0).all() and not np.array_equal(v, before[p][1]) for p, (_, v) in after.items())

    refused = library.run("search", "a dog", "--model", tiny_model_dir, ok=False)
    assert refused.exit_code == 1 and f"was built with model {edited_id}" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    back = json.loads(library.run("index", tmp_path / "p", "--json", "-q").stdout)   # the tiny model again
    assert back["embedded"] == 3
    assert all(np.array_equal(v, before[p][1]) for p, (_, v) in stored(library).items())


def test_fitting_the_hubness_correction_records_the_settings_it_was_fit_with(tiny_model_dir, tmp_path):
    """tune-search adds search.hubness, which makes the text settings photo settings: the record follows, so the
    fitted model's id is its weights and correction, not an 'edited' one."""
    from imgtxt.research.search_fit import write_search

    folder = model_copy(tiny_model_dir, tmp_path / "tuned")
    write_search(folder, {"hubness": {"top_k": 3, "weight": 0.5, "center": 0.4, "bank_stride": 1}})
    config = json.loads((folder / "model.json").read_text())
    assert config[identity.RECORD_KEY] == identity.photo_settings_record(config)
    assert "text" in identity.photo_settings(config)
