"""Full-Network Embedding: layer lists, dimensions, crops, standardization, discretization."""
import numpy as np
import pytest
import torch

from imgtxt.model.backbones import BackboneError, load_backbone
from imgtxt.model.fne import (
    FeatureStats,
    RawFeatureExtractor,
    discretize,
    full_network_embedding,
    l2_normalize,
    standardize,
)


@pytest.fixture(scope="module")
def vgg16_extractor():
    return RawFeatureExtractor(load_backbone("vgg16", "random"), "all", crops=1, precision="fp32")


def test_vgg16_fne_has_the_papers_12416_features(vgg16_extractor):
    ex = vgg16_extractor
    assert ex.dim == 12416
    assert ex.layer_dims == [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512, 4096, 4096]
    assert sum(ex.layer_dims[:13]) == 4224
    assert ex.layer_names[-2:] == ["fc6", "fc7"]
    assert ex.baseline_slice == (12416 - 4096, 12416)  # the one-layer baseline is fc7


def test_vgg16_features_are_post_relu_averages(vgg16_extractor):
    images = np.random.default_rng(0).integers(0, 256, (2, 256, 256, 3), dtype=np.uint8)
    raw = vgg16_extractor(images)
    assert raw.shape == (2, 12416)
    assert (raw >= 0).all()  # every hooked output follows a ReLU


def test_resnet50_layers_count_every_relu_call():
    ex = RawFeatureExtractor(load_backbone("resnet50", "random"), "all", crops=1, precision="fp32")
    assert len(ex.layer_dims) == 1 + 16 * 3   # stem + 3 per bottleneck (shared ReLU module)
    assert ex.layer_dims[-1] == 2048
    assert ex.dim == 64 + 3 * 384 + 4 * 768 + 6 * 1536 + 3 * 3072


def test_efficientnet_lite0_layer_sets_and_real_weights_load():
    backbone = load_backbone("efficientnet_lite0")
    assert backbone.weights_id != "random"
    full = RawFeatureExtractor(backbone, "all", crops=1, precision="fp32")
    assert full.dim == 21008 and full.layer_dims[-1] == 1280
    full.close()
    blocks = RawFeatureExtractor(backbone, "blocks", crops=1, precision="fp32")
    assert blocks.dim == 32 + 16 + 2 * 24 + 2 * 40 + 3 * 80 + 3 * 112 + 4 * 192 + 320 + 1280


def test_missing_torchvision_weights_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(BackboneError, match="backbone-download vgg16"):
        load_backbone("vgg16")
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(BackboneError, match="not a readable weights file"):
        load_backbone("vgg16", bad)
    with pytest.raises(BackboneError, match="unknown backbone"):
        load_backbone("alexnet")


def test_local_weights_file_is_used(tmp_path):
    net = load_backbone("vgg16", "random").net
    path = tmp_path / "vgg.pth"
    torch.save(net.state_dict(), path)
    loaded = load_backbone("vgg16", path)
    assert torch.equal(loaded.net.features[0].weight, net.features[0].weight)
    assert loaded.weights_id.startswith("vgg.pth:")
    wrong = tmp_path / "resnet.pth"
    torch.save(load_backbone("resnet50", "random").net.state_dict(), wrong)
    with pytest.raises(BackboneError, match="does not fit"):
        load_backbone("vgg16", wrong)


def test_ten_crop_geometry():
    """Crops are the 4 corners + centre of the 256 square, then the same 5 mirrored."""
    ex = RawFeatureExtractor.__new__(RawFeatureExtractor)
    ex.torch = torch
    ex.crops = 10
    ex.backbone = type("B", (), {"crop_size": 224})()
    x = torch.arange(256 * 256, dtype=torch.float32).view(1, 1, 256, 256)
    crops = ex._crops(x)
    assert crops.shape == (10, 1, 224, 224)
    assert crops[0, 0, 0, 0] == 0                          # top-left corner
    assert crops[1, 0, 0, 0] == 32                         # top-right: columns 32..255
    assert crops[2, 0, 0, 0] == 32 * 256                   # bottom-left
    assert crops[3, 0, 0, 0] == 32 * 256 + 32              # bottom-right
    assert crops[4, 0, 0, 0] == 16 * 256 + 16              # centre
    for k in range(5):
        assert torch.equal(crops[5 + k], crops[k].flip(-1))  # mirrors
    ex.crops = 1
    assert torch.equal(ex._crops(x)[0], crops[4])


def test_ten_crops_average_the_crops(vgg16_extractor):
    """10-crop features equal the mean of the single-view features of each crop."""
    backbone = vgg16_extractor.backbone
    ten = RawFeatureExtractor(backbone, "all", crops=10, precision="fp32")
    image = np.random.default_rng(1).integers(0, 256, (1, 256, 256, 3), dtype=np.uint8)
    feats = ten(image)
    views = ten._crops(torch.from_numpy(image).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    # feed each crop as a 224 "square" through a centre-crop extractor whose crop covers it all
    single = RawFeatureExtractor(backbone, "all", crops=1, precision="fp32")
    per_view = np.concatenate([single(np.pad(v[None], ((0, 0), (16, 16), (16, 16), (0, 0)))) for v in views])
    np.testing.assert_allclose(feats[0], per_view.mean(0), rtol=1e-4, atol=1e-4)


def test_standardization_uses_training_statistics_only():
    rng = np.random.default_rng(0)
    train = rng.normal(5.0, 2.0, (500, 4)).astype(np.float32)
    train[:, 3] = 7.0  # constant feature
    stats = FeatureStats.fit(train)
    np.testing.assert_allclose(stats.mean[:3], train[:, :3].mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.std[:3], train[:, :3].std(0), rtol=1e-4)
    other = np.array([[5.0, 5.0, 5.0, 100.0]], np.float32) + stats.std * np.array([1, 0, -1, 0], np.float32)
    z = standardize(other, stats)
    np.testing.assert_allclose(z[0, :3], (other[0, :3] - stats.mean[:3]) / stats.std[:3], rtol=1e-5)
    assert z[0, 3] == 0.0  # zero std maps to 0, whatever the value
    # statistics of the evaluated images themselves are never used
    assert not np.allclose(FeatureStats.fit(other).mean, stats.mean)


def test_discretization_boundaries():
    z = np.array([[-1.0, -0.2500001, -0.25, -0.1, 0.0, 0.15, 0.1500001, 3.0]], np.float32)
    assert discretize(z).tolist() == [[-1, -1, 0, 0, 0, 0, 1, 1]]
    assert discretize(z).dtype == np.int8


def test_full_network_embedding_pipeline():
    rng = np.random.default_rng(0)
    train = rng.normal(0, 1, (300, 10)).astype(np.float32)
    stats = FeatureStats.fit(train)
    fne = full_network_embedding(train, stats, chunk=64)
    assert fne.dtype == np.int8 and set(np.unique(fne)) <= {-1, 0, 1}
    np.testing.assert_array_equal(fne, discretize(standardize(train, stats)))
    assert np.allclose(np.linalg.norm(l2_normalize(train), axis=1), 1.0)


def test_fp32_turns_tf32_off_for_the_pass_only(monkeypatch):
    """cuDNN's convolutions use TF32 by default; "fp32" features on CUDA must not (on an H200 they moved by 4e-2
    from the CPU's). The flags are off during the network's pass and as they were after it."""
    import imgtxt.model.fne as fne

    seen = []
    extractor = RawFeatureExtractor(load_backbone("efficientnet_lite0", "random"), "all", 1, device="cpu",
                                    precision="fp32")
    monkeypatch.setattr(extractor, "net", lambda x: seen.append(
        (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)))
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        extractor._run(np.zeros((1, 256, 256, 3), np.uint8))
        assert seen == [(True, True)]              # on the CPU: untouched (the CUDA pass needs a GPU to test)
        with fne._tf32(torch, allowed=False):
            assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == (False, False)
        assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == (True, True)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_training_data_standardises_with_the_train_images_statistics(monkeypatch):
    """build_training_data, the path `imgtxt train` takes: the FNE statistics it fits and stores are the train
    split's, and both splits are discretised with them. Hand-made raw features: train feature 0 is 0 or 2 (mean 1,
    std 1), val's is 10 or 12 (mean 11). With train's statistics every val value is far above the cut (z = 9, 11
    -> 1); with val's own they would be -1 and 1."""
    from types import SimpleNamespace

    from imgtxt.model.cnn_torch import FeatureSettings
    from imgtxt.research import pipeline
    from imgtxt.research.datasets import Split

    raw = {"train": np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 5.0], [2.0, 7.0]], np.float32),
           "val": np.array([[10.0, 1.0], [12.0, 1.0]], np.float32)}
    words = ["a dog runs", "a cat sits", "two men walk", "a red car", "the blue sky"]

    def fake_split(dataset, data_dir, name, **kwargs):
        n = len(raw[name])
        return Split(dataset, name, [f"{name}{i}.jpg" for i in range(n)], [words[j % 5] for j in range(5 * n)])

    fake_extractor = SimpleNamespace(backbone=SimpleNamespace(id="fake@0"), dim=2, baseline_slice=(0, 2))
    monkeypatch.setattr(pipeline, "load_split", fake_split)
    monkeypatch.setattr(pipeline, "raw_split_features",
                        lambda split, settings, extractor=None, quiet=False: (raw[split.name], fake_extractor))
    data = pipeline.build_training_data("flickr8k", "unused", "fne", FeatureSettings(), min_count=1)
    np.testing.assert_allclose(data.stats.mean, [1.0, 4.0])
    np.testing.assert_allclose(data.stats.std, [1.0, np.sqrt(5.0)], rtol=1e-6)
    assert data.train_features[:, 0].tolist() == [-1, 1, -1, 1]
    assert data.val_features[:, 0].tolist() == [1, 1]           # val's own statistics: [-1, 1]
    assert data.val_features[:, 1].tolist() == [-1, -1]         # (1 - 4) / sqrt(5) = -1.34
