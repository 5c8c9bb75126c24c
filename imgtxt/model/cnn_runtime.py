"""The CNN at index time without torch: the exported feature graph (`cnn_export`) on OpenVINO or ONNX Runtime.

`onnx_embedder(model)` gives an object with the ImageEmbedder interface (`resize_size`, `embed`) when a
graph for the model's backbone, layer set and crops exists, else None (the caller falls back to torch).
Where a graph is looked for, in order:
  1. MODEL_DIR/cnn.onnx                          (`imgtxt export-cnn MODEL_DIR`)
  2. <cache>/cnn/<backbone>-<layers>-<crops>.onnx  (written by the first `imgtxt index` that had torch)
IMGTXT_CNN_RUNTIME=torch forces the torch path (comparisons); =openvino or =onnxruntime picks that runtime
and refuses to fall back to torch.
Device: where ONNX Runtime offers CUDA (the gpu extra, onnxruntime-gpu) the graph runs on the NVIDIA GPU, and on
the CPU when the session cannot start there (no GPU, no driver). Where ONNX Runtime has no CUDA provider (the
plain onnxruntime, or only OpenVINO) but an NVIDIA GPU is there and torch can use it, the CNN runs in torch on that
GPU instead (`onnx_embedder` returns None: the torch path picks CUDA itself). IMGTXT_DEVICE=cpu keeps it on the
CPU; =gpu refuses to run without one. `extractor.device_line` says which it got.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import numpy as np

from imgtxt.errors import ModelError, install_hint

RUNTIME_ENV = "IMGTXT_CNN_RUNTIME"
DEVICE_ENV = "IMGTXT_DEVICE"
CUDA = "CUDAExecutionProvider"


CPU_BATCH = 4   # photos per inference on the CPU (raw_features)


class GraphError(ModelError):
    """A graph file that does not belong to this model or cannot be loaded."""


def graph_key(features: dict) -> str:
    """File name of the cached graph: everything that changes its numbers."""
    text = json.dumps([features["backbone_id"], features["layer_set"], features["crops"]])
    return (f"{features['backbone']}-{features['layer_set']}-{features['crops']}crop-"
            f"{hashlib.sha1(text.encode()).hexdigest()[:10]}.onnx")


def cached_graph_path(features: dict) -> Path:
    from imgtxt.paths import cache_dir

    return cache_dir() / "cnn" / graph_key(features)


def graph_paths(model) -> list[Path]:
    return [Path(model.folder) / "cnn.onnx", cached_graph_path(model.features)]


BACKENDS = ("openvino", "onnxruntime")   # in order of preference: OpenVINO ran Lite0 2-4x faster here


def available_backends() -> list[str]:
    import importlib.util

    return [b for b in BACKENDS if importlib.util.find_spec(b) is not None]


def cuda_offered() -> bool:
    """ONNX Runtime was built with CUDA (onnxruntime-gpu); whether a GPU is there shows when a session starts."""
    if "onnxruntime" not in available_backends():
        return False
    import onnxruntime as ort

    return CUDA in ort.get_available_providers()


def nvidia_gpu_present() -> bool:
    """An NVIDIA driver is loaded (its device node or /proc entry): checked before torch is imported to ask it,
    since importing torch costs an index run seconds on the many machines without such a GPU."""
    import shutil

    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version")) \
        or shutil.which("nvidia-smi") is not None


def torch_cuda_instead(device: str) -> bool:
    """ONNX Runtime cannot reach the GPU (no CUDA provider) but torch can: the CNN runs in torch on CUDA."""
    import importlib.util

    if device == "cpu" or cuda_offered() or not nvidia_gpu_present() or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


class OnnxFeatureExtractor:
    """uint8 squares (N, R, R, 3) -> raw FNE features (N, D) float32, from the exported graph on the CPU.

    backend "openvino" or "onnxruntime" (always fp32); precision "fp32", "bf16" or "auto" (OpenVINO only).
    gpu: ask ONNX Runtime for CUDA first; `self.device` is then "cuda" if the session got it, else "cpu"."""

    def __init__(self, path: Path | str, threads: int | None = None, backend: str | None = None,
                 precision: str = "fp32", compile_cache: bool = True, gpu: bool = False):
        self.path, self.precision, self.compile_cache = Path(path), precision, compile_cache
        self.device = "cpu"
        if gpu:
            backend, self.precision = "onnxruntime", "fp32"
        backends = available_backends()
        self.backend = backend or (backends[0] if backends else "onnxruntime")
        threads = threads or os.cpu_count() or 1
        try:
            if self.backend == "openvino":
                props = self._open_openvino(threads)
            else:
                props = self._open_onnxruntime(threads, gpu)
        except ImportError:
            raise GraphError(f"the {self.backend} package is not installed") from None
        except GraphError:
            raise
        except Exception as e:  # noqa: BLE001 - both runtimes raise their own exception types
            raise GraphError(f"{self.path}: not a loadable ONNX graph ({type(e).__name__}: {e})") from None
        try:
            self.meta = {key: json.loads(value) for key, value in props.items()}
            self.resize_size = int(self.meta["resize_size"])
            self.dim = int(self.meta["dim"])
        except (KeyError, ValueError, TypeError):
            raise GraphError(f"{self.path}: not an imgtxt CNN graph (no settings stored in it)") from None

    def _open_onnxruntime(self, threads: int, gpu: bool = False) -> dict:
        import warnings

        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # Decoding threads share the cores: idle CNN threads must sleep, not spin.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = [CUDA, "CPUExecutionProvider"] if gpu else ["CPUExecutionProvider"]
        with warnings.catch_warnings():  # a CUDA provider that cannot start: ONNX Runtime warns and uses the CPU
            warnings.simplefilter("ignore")
            session = ort.InferenceSession(str(self.path), options, providers=providers)
        self.device = "cuda" if session.get_providers()[0] == CUDA else "cpu"
        name = session.get_inputs()[0].name
        self._run = lambda squares: session.run(None, {name: squares})[0]
        return session.get_modelmeta().custom_metadata_map

    def _open_openvino(self, threads: int) -> dict:
        import openvino as ov

        from imgtxt.paths import cache_dir as cache_root
        from imgtxt.paths import private_dirs

        core = ov.Core()
        model = core.read_model(str(self.path))
        if not model.has_rt_info(["framework", "format"]):
            raise GraphError(f"{self.path}: not an imgtxt CNN graph (no settings stored in it)")
        props = {key: model.get_rt_info(["framework", key]).astype(str)
                 for key in model.get_rt_info()["framework"]}
        # "auto" (the models' default): bf16 where the CPU computes it natively. On the shipped model it moved
        # val rsum from 266.54 (fp32) to 266.62 and saved ~15% of the CNN's time (bench/onnx_agreement.py).
        bf16 = self.precision == "bf16" or (
            self.precision == "auto" and "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        self.precision = "bf16" if bf16 else "fp32"
        config = {"INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32", "INFERENCE_NUM_THREADS": threads,
                  "PERFORMANCE_HINT": "LATENCY"}
        if self.compile_cache:  # the compiled blob is cached: later runs skip most of the compile time
            try:
                private_dirs(cache_root() / "cnn" / "openvino")
                config["CACHE_DIR"] = str(cache_root() / "cnn" / "openvino")
            except OSError:
                pass
        request = core.compile_model(model, "CPU", config).create_infer_request()
        # One request runs one inference at a time ("Infer Request is busy" otherwise): server threads take
        # turns. Each inference is given every core already (INFERENCE_NUM_THREADS), and one request per
        # thread would hold its own copy of the activations.
        busy = threading.Lock()

        def run(squares):
            with busy:
                return request.infer({0: squares})[0].copy()
        self._run = run
        return props

    @property
    def device_line(self) -> str:
        if self.device == "cuda":
            return "the GPU (CUDA, ONNX Runtime)"
        name = {"openvino": "OpenVINO", "onnxruntime": "ONNX Runtime"}.get(self.backend, self.backend)
        return f"the CPU ({name}, {self.precision})"

    def matches(self, features: dict) -> bool:
        m = self.meta
        same_weights = m.get("backbone_id") == features["backbone_id"] or (
            features["backbone_id"].endswith("@random") and m.get("backbone_id", "").split("@")[0]
            == features["backbone_id"].split("@")[0])
        return (same_weights and m.get("layer_set") == features["layer_set"]
                and m.get("crops") == features["crops"] and self.dim == features["raw_dim"])

    def raw_features(self, squares: np.ndarray) -> np.ndarray:
        """On the CPU in runs of CPU_BATCH photos: the runtime's activations grow ~40 MB a photo in a run (an
        index batch of 32 took 1.4 GB), its CPU time a photo does not (bench/index_memory.py)."""
        squares = np.ascontiguousarray(squares, dtype=np.uint8)
        step = len(squares) if self.device == "cuda" else CPU_BATCH
        return np.concatenate([np.asarray(self._run(squares[s:s + step]), dtype=np.float32)
                               for s in range(0, len(squares), max(1, step))]) if len(squares) else \
            np.zeros((0, self.dim), np.float32)

    __call__ = raw_features


class OnnxImageEmbedder:
    """Photos -> joint-space vectors: the ONNX CNN, then the model's numpy FNE and projection."""

    def __init__(self, model, extractor: OnnxFeatureExtractor):
        self.model, self.extractor = model, extractor

    @property
    def resize_size(self) -> int:
        return self.extractor.resize_size

    @property
    def device_line(self) -> str:
        return self.extractor.device_line

    def embed(self, squares: np.ndarray) -> np.ndarray:
        return self.model.encode_raw_images(self.extractor.raw_features(squares))


def open_extractor(path: Path, threads: int | None, backend: str | None, precision: str,
                   device: str = "auto", notice=None) -> OnnxFeatureExtractor:
    """The graph at `path` on the GPU when ONNX Runtime offers CUDA and a session starts there (device "auto"
    or "gpu"), else on the CPU with `backend`. device "gpu" refuses the CPU; "cpu" never tries the GPU."""
    if device != "cpu" and backend in (None, "onnxruntime") and cuda_offered():
        extractor = OnnxFeatureExtractor(path, threads, "onnxruntime", precision, gpu=True)
        if extractor.device == "cuda":
            return extractor
        if device == "gpu":
            raise GraphError(f"{DEVICE_ENV}=gpu but ONNX Runtime could not start CUDA (no NVIDIA GPU or driver?)")
        if notice:
            notice("imgtxt: ONNX Runtime offers CUDA but could not start it (no GPU or driver?): the CNN runs on the CPU")
    elif device == "gpu":
        raise GraphError(f"{DEVICE_ENV}=gpu but ONNX Runtime has no CUDA provider: install the gpu extra in place of "
                         f"onnxruntime: pip uninstall onnxruntime; {install_hint('gpu')}")
    return OnnxFeatureExtractor(path, threads, backend, precision)


def one_blas_thread():
    """A context limiting BLAS (numpy's OpenBLAS/MKL) to one thread, as the index path's numpy work wants: the
    FNE standardisation and projection are small matmuls per batch, and a second BLAS thread spins against the
    decoding threads (16.5 ms CPU per photo with two OpenBLAS threads against 1.1 ms with one, on 2 cores)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def export_to_cache(model) -> Path | None:
    """Export the model's CNN into the cache once (needs torch); None where that cannot be done."""
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return None
    from .cnn_export import export_for_model

    try:
        return export_for_model(model, cached_graph_path(model.features))
    except OSError:  # an unwritable cache: the torch path still works
        return None


def onnx_embedder(model, threads: int | None = None, export: bool = True, notice=None):
    """The ONNX embedder for `model`, exporting its graph first if needed and possible; None -> use torch."""
    from imgtxt.safe_text import printable

    choice = os.environ.get(RUNTIME_ENV, "").strip().lower()
    if choice not in ("", "torch", *BACKENDS):   # a typo must not quietly pick another runtime
        raise GraphError(f"{RUNTIME_ENV}={printable(choice)[:40]}: use {', '.join(('torch', *BACKENDS))} "
                         f"(or leave it unset)")
    device = os.environ.get(DEVICE_ENV, "auto").strip().lower()
    if device not in ("auto", "cpu", "gpu"):
        raise GraphError(f"{DEVICE_ENV}={printable(device)[:40]}: use auto, cpu or gpu")
    if choice == "torch":
        return None
    if not choice and torch_cuda_instead(device):   # (a runtime chosen by name is kept to)
        if notice:
            notice("imgtxt: ONNX Runtime has no CUDA provider: the CNN runs in torch on the GPU")
        return None
    backend = choice if choice in BACKENDS else None
    if not available_backends():
        if choice:
            raise GraphError(f"{RUNTIME_ENV}={choice} but neither openvino nor onnxruntime is installed")
        return None
    for path in graph_paths(model):
        if path.is_file():
            extractor = open_extractor(path, threads, backend, model.features.get("precision", "fp32"), device, notice)
            if extractor.matches(model.features):
                return OnnxImageEmbedder(model, extractor)
            if path.name == "cnn.onnx":
                raise GraphError(f"{path} was exported for other CNN settings than {model.folder}/model.json; "
                                 f"re-run `imgtxt export-cnn {model.folder}`")
    if export:
        if notice:
            notice("imgtxt: exporting the CNN to ONNX once (later runs start without torch)")
        path = export_to_cache(model)
        if path is not None:
            return onnx_embedder(model, threads, export=False, notice=notice)
    if choice:
        raise GraphError(f"{RUNTIME_ENV}={choice} but there is no CNN graph for {model.folder}")
    return None
