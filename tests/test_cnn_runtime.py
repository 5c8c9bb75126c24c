"""The torch-free CNN: the exported ONNX graph gives torch's fp32 features, and `imgtxt index` uses it
without importing torch."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, write_photo  # noqa: E402

from imgtxt.model.cnn_export import export_extractor  # noqa: E402
from imgtxt.model.cnn_runtime import (  # noqa: E402
    GraphError,
    OnnxFeatureExtractor,
    available_backends,
    onnx_embedder,
)

pytestmark = pytest.mark.skipif(not available_backends(), reason="neither openvino nor onnxruntime is installed")
from imgtxt.model.fne import FeatureStats, RawFeatureExtractor, full_network_embedding  # noqa: E402


def _squares(n, seed=0, size=256):
    # smooth photo-like content: noise would make every feature tiny and the comparison meaningless
    from PIL import Image

    rng = np.random.default_rng(seed)
    return np.stack([np.asarray(Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
                                .resize((size, size), Image.BICUBIC)) for _ in range(n)])


@pytest.mark.parametrize("backend,crops", [("openvino", 1), ("onnxruntime", 1), ("openvino", 10)])
def test_exported_graph_equals_torch_fp32(tmp_path, backend, crops):
    pytest.importorskip(backend, reason=f"{backend} is in the test extra")
    from imgtxt.model.backbones import load_backbone

    backbone = load_backbone("efficientnet_lite0")
    squares = _squares(8 if crops == 1 else 2)
    expected = RawFeatureExtractor(backbone, "all", crops=crops, precision="fp32")
    want = expected(squares)
    path = export_extractor(expected, tmp_path / "cnn.onnx")
    onnx = OnnxFeatureExtractor(path, threads=1, backend=backend)
    assert (onnx.dim, onnx.resize_size) == (21008, 256)
    got = onnx.raw_features(squares)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    # the discretized features barely move (statistics from the torch features, as in training)
    stats = FeatureStats.fit(want)
    agree = np.mean(full_network_embedding(want, stats) == full_network_embedding(got, stats))
    assert agree > 0.999
    assert onnx.raw_features(squares[:1]).shape == (1, 21008)   # any batch size


def test_index_uses_onnx_and_matches_torch_vectors(tmp_path, tiny_model, monkeypatch):
    from imgtxt.model import modelfile
    from imgtxt.model.cnn_runtime import OnnxImageEmbedder
    from imgtxt.research.pipeline import FeatureSettings, open_extractor

    embedder = onnx_embedder(tiny_model)   # conftest exported the tiny model's cnn.onnx
    assert isinstance(embedder, OnnxImageEmbedder)
    squares = _squares(2, seed=3)
    torch_raw = open_extractor(FeatureSettings(layer_set="all", crops=1, precision="fp32"))(squares)
    got, want = embedder.embed(squares), tiny_model.encode_raw_images(torch_raw)
    if embedder.extractor.precision == "fp32":
        np.testing.assert_allclose(got, want, atol=2e-3)
    else:  # bf16 ("auto" on a CPU with native bf16) moves ~2% of the FNE entries across a cut point
        assert (np.sum(got * want, axis=1) > 0.97).all()
    monkeypatch.setenv("IMGTXT_CNN_RUNTIME", "torch")
    assert onnx_embedder(tiny_model) is None
    monkeypatch.setattr(modelfile, "_LOADED_CNNS", {})
    monkeypatch.setattr(tiny_model, "_cnn", None)
    assert not isinstance(tiny_model.image_embedder(), OnnxImageEmbedder)


def test_cold_index_imports_neither_torch_nor_timm(tmp_path, tiny_model_dir):
    for i in range(3):
        write_photo(tmp_path / "photos" / f"p{i}.jpg", seed=i)
    script = (
        "import sys\n"
        "from imgtxt.cli.main import app\n"
        "try:\n"
        f"    app(['index', {str(tmp_path / 'photos')!r}, '--model', {str(tiny_model_dir)!r}, '--quiet', '--json'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(sorted(m for m in ('torch', 'timm', 'torchvision') if m in sys.modules))\n"
    )
    env = {**os.environ, "IMGTXT_INDEX_DIR": str(tmp_path / "index"), "IMGTXT_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    summary, modules = out.stdout.strip().splitlines()
    assert json.loads(summary)["embedded"] == 3
    assert modules == "[]"


def test_graph_for_other_settings_is_refused(tmp_path, tiny_model):
    import shutil

    from imgtxt.model.modelfile import TrainedModel

    folder = tmp_path / "model"
    shutil.copytree(tiny_model.folder, folder)
    config = json.loads((folder / "model.json").read_text())
    config["features"]["crops"] = 10
    (folder / "model.json").write_text(json.dumps(config))
    with pytest.raises(GraphError, match="export-cnn"):
        onnx_embedder(TrainedModel.load(folder), export=False)
    (folder / "cnn.onnx").write_bytes(b"not a graph")
    with pytest.raises(GraphError, match="not a loadable ONNX graph"):
        onnx_embedder(TrainedModel.load(folder), export=False)


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_threads_sharing_one_loaded_cnn_all_get_their_features(tiny_model, backend, monkeypatch):
    """`imgtxt serve` runs photo pages in a thread pool over one loaded CNN: OpenVINO's single infer request
    said "Infer Request is busy" to every thread but one."""
    pytest.importorskip(backend, reason=f"{backend} is in the test extra")
    from concurrent.futures import ThreadPoolExecutor

    from imgtxt.model.cnn_runtime import graph_paths

    path = next(p for p in graph_paths(tiny_model) if p.is_file())
    extractor = OnnxFeatureExtractor(path, backend=backend)
    squares = _squares(16, size=extractor.resize_size)
    expected = extractor(squares)
    with ThreadPoolExecutor(16) as pool:
        rounds = list(pool.map(lambda i: extractor(squares[i:i + 1]), list(range(16)) * 3))
    np.testing.assert_allclose(np.concatenate(rounds[:16]), expected, rtol=1e-3, atol=1e-4)
