"""Where the CNN graph runs: the GPU when ONNX Runtime offers CUDA and a session starts there, else the CPU.
No GPU here: ONNX Runtime's provider list and session are replaced to stand for a machine that has one."""
from __future__ import annotations

import json

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra")

from imgtxt.model import cnn_runtime  # noqa: E402
from imgtxt.model.cnn_runtime import CUDA, GraphError, open_extractor  # noqa: E402


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A tiny graph with an imgtxt CNN graph's interface: uint8 (N, 8, 8, 3) -> per-channel means (N, 3)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Cast", ["squares"], ["pixels"], to=TensorProto.FLOAT),
             helper.make_node("ReduceMean", ["pixels", "axes"], ["features"], keepdims=0)]
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])
    model = helper.make_model(helper.make_graph(
        nodes, "means", [helper.make_tensor_value_info("squares", TensorProto.UINT8, [None, 8, 8, 3])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 3])], [axes]),
        opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    from imgtxt.model.cnn_export import GRAPH_FORMAT

    onnx.helper.set_model_props(model, {"format": json.dumps(GRAPH_FORMAT), "resize_size": json.dumps(8),
                                        "dim": json.dumps(3)})
    path = tmp_path_factory.mktemp("graph") / "cnn.onnx"
    onnx.save(model, path)
    return path


class FakeCudaSession(ort.InferenceSession):
    """A session that got the CUDA provider (it computes on the CPU: the numbers are what is checked)."""
    requested: list = []

    def __init__(self, path, options=None, providers=None, **kwargs):
        FakeCudaSession.requested.append(list(providers))
        self.granted = list(providers)
        super().__init__(path, options, providers=["CPUExecutionProvider"])

    def get_providers(self):
        return self.granted


@pytest.fixture()
def cuda_offered(monkeypatch):
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, "CPUExecutionProvider"])


def test_gpu_is_used_by_default_when_cuda_starts(graph, cuda_offered, monkeypatch):
    monkeypatch.setattr(ort, "InferenceSession", FakeCudaSession)
    FakeCudaSession.requested.clear()
    extractor = open_extractor(graph, 2, None, "fp32")
    assert extractor.device == "cuda" and extractor.backend == "onnxruntime"
    assert FakeCudaSession.requested == [[CUDA, "CPUExecutionProvider"]]
    assert extractor.device_line == "the GPU (CUDA, ONNX Runtime)"
    squares = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    np.testing.assert_allclose(extractor.raw_features(squares), squares.mean(axis=(1, 2)), rtol=1e-6)


def test_cuda_offered_but_no_gpu_falls_back_to_the_cpu(graph, cuda_offered):
    """onnxruntime-gpu on a machine without a GPU: the real session starts on the CPU, and says so."""
    notices = []
    extractor = open_extractor(graph, 2, None, "fp32", notice=notices.append)
    assert extractor.device == "cpu" and extractor.device_line.startswith("the CPU (")
    assert notices and "could not start" in notices[0]
    with pytest.raises(GraphError, match="could not start CUDA"):
        open_extractor(graph, 2, None, "fp32", device="gpu")


def test_no_cuda_provider_means_the_cpu_runtime_of_choice(graph):
    assert not cnn_runtime.cuda_offered()            # this machine: no onnxruntime-gpu
    extractor = open_extractor(graph, 2, None, "fp32")
    assert extractor.device == "cpu"
    assert extractor.backend == cnn_runtime.available_backends()[0]   # OpenVINO where installed, as before
    with pytest.raises(GraphError) as refused:
        open_extractor(graph, 2, None, "fp32", device="gpu")
    assert str(refused.value) == ("IMGTXT_DEVICE=gpu but ONNX Runtime has no CUDA provider: install the gpu extra in "
                                  "place of onnxruntime: pip uninstall onnxruntime; pip install '.[gpu]' in the imgtxt "
                                  "checkout")


def test_no_cuda_provider_from_a_wheel_names_the_package(graph, as_wheel):
    """From a wheel the hint names onnxruntime-gpu itself: `imgtxt[gpu]` would not resolve (no package index has
    imgtxt)."""
    with pytest.raises(GraphError) as refused:
        open_extractor(graph, 2, None, "fp32", device="gpu")
    assert str(refused.value).endswith("pip uninstall onnxruntime; pip install 'onnxruntime-gpu>=1.17'")


def test_device_cpu_never_tries_the_gpu(graph, cuda_offered, monkeypatch):
    monkeypatch.setattr(ort, "InferenceSession", FakeCudaSession)
    FakeCudaSession.requested.clear()
    extractor = open_extractor(graph, 2, "onnxruntime", "fp32", device="cpu")
    assert extractor.device == "cpu" and FakeCudaSession.requested == [["CPUExecutionProvider"]]


def test_device_setting_is_checked(monkeypatch, tiny_model):
    monkeypatch.setenv("IMGTXT_DEVICE", "tpu")
    with pytest.raises(GraphError, match="use auto, cpu or gpu"):
        cnn_runtime.onnx_embedder(tiny_model, export=False)


# ------------------------------------------------------------------ no CUDA provider: torch on the GPU

@pytest.fixture()
def torch_sees_a_gpu(monkeypatch):
    """A machine with an NVIDIA GPU that torch can use, and ONNX Runtime without its CUDA provider (this one)."""
    torch = pytest.importorskip("torch")
    asked = []
    monkeypatch.setattr(cnn_runtime, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(True) or True)
    for variable in ("IMGTXT_DEVICE", "IMGTXT_CNN_RUNTIME"):
        monkeypatch.delenv(variable, raising=False)
    return asked


def test_torch_on_cuda_when_onnx_runtime_has_no_cuda_provider(torch_sees_a_gpu, tiny_model, monkeypatch):
    notices = []
    assert not cnn_runtime.cuda_offered()
    assert cnn_runtime.onnx_embedder(tiny_model, export=False, notice=notices.append) is None   # the torch path ...
    assert notices == ["imgtxt: ONNX Runtime has no CUDA provider: the CNN runs in torch on the GPU"]
    import torch

    from imgtxt.model.cnn_torch import ImageEmbedder

    class NoGpuHere(Exception):
        pass

    moved = []   # ... whose network is moved to CUDA (stopped there: this machine has no GPU)

    def to(self, *args, **kwargs):
        moved.append(str(args[0]) if args else str(kwargs))
        raise NoGpuHere

    monkeypatch.setattr(torch.nn.Module, "to", to)
    with pytest.raises(NoGpuHere):
        ImageEmbedder(tiny_model)
    assert moved == ["cuda"]


def test_torch_cuda_is_not_chosen_over_onnx_runtime_cuda_or_against_the_settings(torch_sees_a_gpu, monkeypatch,
                                                                                 tiny_model):
    assert not cnn_runtime.torch_cuda_instead("cpu") and not torch_sees_a_gpu   # IMGTXT_DEVICE=cpu: torch not asked
    monkeypatch.setattr(cnn_runtime, "nvidia_gpu_present", lambda: False)
    assert not cnn_runtime.torch_cuda_instead("auto") and not torch_sees_a_gpu  # no NVIDIA driver: torch not asked
    monkeypatch.setattr(cnn_runtime, "nvidia_gpu_present", lambda: True)
    assert cnn_runtime.torch_cuda_instead("auto") and cnn_runtime.torch_cuda_instead("gpu")
    monkeypatch.setenv("IMGTXT_CNN_RUNTIME", "onnxruntime")   # a runtime chosen by name is kept to
    assert cnn_runtime.onnx_embedder(tiny_model, export=False) is not None
    monkeypatch.delenv("IMGTXT_CNN_RUNTIME")
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, "CPUExecutionProvider"])
    assert not cnn_runtime.torch_cuda_instead("auto")          # ONNX Runtime's own CUDA comes first


def test_the_cpu_runs_a_batch_in_short_runs_and_the_gpu_whole(graph, cuda_offered, monkeypatch):
    """An index batch through the CPU runtime in runs of CPU_BATCH photos (its activations grow with the run), on
    the GPU at once; the features are the same."""
    squares = np.random.default_rng(1).integers(0, 256, (10, 8, 8, 3), dtype=np.uint8)
    monkeypatch.setattr(ort, "InferenceSession", FakeCudaSession)
    for device, runs in (("cpu", [4, 4, 2]), ("gpu", [10])):
        extractor = open_extractor(graph, 2, "onnxruntime", "fp32", device=device)
        seen, run = [], extractor._run
        extractor._run = lambda part, run=run, seen=seen: seen.append(len(part)) or run(part)
        np.testing.assert_allclose(extractor.raw_features(squares), squares.mean(axis=(1, 2)), rtol=1e-6)
        assert seen == runs and cnn_runtime.CPU_BATCH == 4
