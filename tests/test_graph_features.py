"""Dataset features on the exported graph (`--runtime openvino`): torch's fp32 features within the index path's
tolerance, cached under their own key, and torch's keys unchanged."""
import numpy as np
import pytest
from conftest import write_photo  # noqa: E402

from imgtxt.research.datasets import Split  # noqa: E402
from imgtxt.research.feature_cache import FeatureSpec  # noqa: E402
from imgtxt.research.pipeline import FeatureSettings, open_extractor, raw_split_features  # noqa: E402

LITE0_ID = "efficientnet_lite0@efficientnet-lite0-57934424.pth:579344248a93"


def test_torch_keys_are_the_ones_caches_already_hold_and_openvino_gets_its_own():
    torch_spec = FeatureSpec(LITE0_ID, "all", 1, "fp32")
    assert torch_spec.key == "efficientnet_lite0-all-1crop-fp32-087a0d19ef"   # the key of existing caches
    assert FeatureSpec(LITE0_ID, "all", 1, "fp32", "torch").key == torch_spec.key
    ov = FeatureSpec(LITE0_ID, "all", 1, "fp32", "openvino").key
    assert ov.startswith("efficientnet_lite0-all-1crop-fp32-openvino-") and ov != torch_spec.key


def test_openvino_runtime_needs_fp32_and_a_known_name():
    with pytest.raises(ValueError, match="--precision fp32"):
        open_extractor(FeatureSettings(precision="auto", runtime="openvino"))
    with pytest.raises(ValueError, match="runtime must be one of"):
        open_extractor(FeatureSettings(precision="fp32", runtime="tensorrt"))


@pytest.mark.parametrize("crops", [1, 10])
def test_openvino_dataset_features_equal_torch_fp32(tmp_path, monkeypatch, crops):
    pytest.importorskip("openvino")
    monkeypatch.setenv("IMGTXT_CACHE_DIR", str(tmp_path / "cache"))
    paths = [str(write_photo(tmp_path / "img" / f"{i}.jpg", seed=i)) for i in range(5 if crops == 1 else 3)]
    split = Split("flickr8k", "val", paths, ["a photo"] * 5 * len(paths))
    want, _ = raw_split_features(split, FeatureSettings(precision="fp32", crops=crops), quiet=True)
    got, extractor = raw_split_features(split, FeatureSettings(precision="fp32", crops=crops, runtime="openvino"),
                                        quiet=True)
    assert got.shape == want.shape == (len(paths), 21008)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert not np.array_equal(got, want)   # really computed by the graph, not read from torch's cache file
    folders = sorted(p.name for p in (tmp_path / "cache" / "flickr8k").iterdir())
    assert len(folders) == 2 and any("-openvino-" in f for f in folders)
    assert (extractor.layer_dims[-1], extractor.baseline_slice) == (1280, (21008 - 1280, 21008))
    # a second run reads the cache and reuses the exported graph (no second export)
    again, _ = raw_split_features(split, FeatureSettings(precision="fp32", crops=crops, runtime="openvino"),
                                  quiet=True)
    np.testing.assert_array_equal(again, got)
    assert len(list((tmp_path / "cache" / "cnn").glob("*.onnx"))) == 1
