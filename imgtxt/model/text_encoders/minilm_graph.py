"""MiniLM's transformer layers as an OpenVINO graph, for the queries of a process that searches more than once.

A query's ~10 tokens make matrix products that numpy's BLAS runs far below its speed; OpenVINO's CPU kernels run
the same six layers from the same int8 matrices (compressed weights: int8 x per-row scale, float32 activations,
float32 precision) in 0.6-0.75x the CPU time on AVX2 (docs/performance.md). The mean pooling and the trained head
run in the graph too: numpy's three head products for one vector cost ~0.8 ms, the graph's ~0.2 ms. The graph
costs ~0.3 s to compile and ~100 MB resident, so a one-shot `imgtxt search` never builds it: the second
single-sentence encode of a process starts compiling it on a thread (text_encoders/minilm.py), and numpy answers
until it is ready. States and vectors agree with numpy's to ~1e-5 (tests/test_query_graph.py).
IMGTXT_QUERY_GRAPH=0 keeps numpy for every query.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

ENV = "IMGTXT_QUERY_GRAPH"
SETTINGS = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32",
            # float32 activations: OpenVINO would quantise them to int8 on CPUs with VNNI, moving scores by ~1e-2
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def build(tensors, prefix: str, config: dict, head=None):
    """The layers as an openvino.Model from (1, T, hidden) embeddings to (1, T, hidden) states (T dynamic), for a
    single sentence (no padding mask); with `head` (text_encoders/head.NumpyHead) also the sentence vector (mean
    pooled, L2-normalised) and the joint vector (the head's output, L2-normalised), as minilm.Runtime computes
    them. int8 matrices stay int8 in the graph, scaled per row."""
    import openvino as ov
    import openvino.opset13 as ops

    def stored(matrix, scale):   # (out, in) as tensor_file.Dense keeps it
        if scale is None:
            return ops.constant(np.asarray(matrix, np.float32))
        return ops.multiply(ops.convert(ops.constant(np.asarray(matrix)), ov.Type.f32),
                            ops.constant(np.asarray(scale, np.float32).reshape(-1, 1)))

    heads, width = config["heads"], config["hidden"]

    def const(name):
        return ops.constant(np.asarray(tensors[prefix + name], np.float32))

    def dense(x, name):
        full = prefix + name + ".weight"
        if hasattr(tensors, "stored") and full + ".scale" in tensors:   # as the numpy layers read it (minilm.py)
            w = stored(tensors.stored(full), tensors.stored(full + ".scale"))
        else:
            w = const(name + ".weight")
        return ops.add(ops.matmul(x, w, False, True), const(name + ".bias"))

    def norm(x, name):
        n = ops.mvn(x, ops.constant(np.array([-1], np.int64)), True, float(config["layer_norm_eps"]), "inside_sqrt")
        return ops.add(ops.multiply(n, const(name + ".weight")), const(name + ".bias"))

    def split(t):
        t = ops.reshape(t, ops.constant(np.array([1, -1, heads, width // heads], np.int64)), False)
        return ops.transpose(t, ops.constant(np.array([0, 2, 1, 3], np.int64)))

    x_in = ops.parameter([1, -1, width], ov.Type.f32, name="embeddings")
    x = x_in
    for i in range(config["layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (split(dense(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        attn = ops.softmax(ops.multiply(ops.matmul(q, k, False, True),
                                        ops.constant(np.float32(1 / math.sqrt(width // heads)))), -1)
        ctx = ops.transpose(ops.matmul(attn, v, False, False), ops.constant(np.array([0, 2, 1, 3], np.int64)))
        ctx = ops.reshape(ctx, ops.constant(np.array([1, -1, width], np.int64)), False)
        x = norm(ops.add(dense(ctx, p + "attention.output.dense"), x), p + "attention.output.LayerNorm")
        inner = ops.gelu(dense(x, p + "intermediate.dense"), "erf")
        x = norm(ops.add(dense(inner, p + "output.dense"), x), p + "output.LayerNorm")
    if head is None:
        return ov.Model([x], [x_in])

    def unit(v):   # v / max(|v|, 1e-12), row-wise
        length = ops.sqrt(ops.reduce_sum(ops.multiply(v, v), ops.constant(np.array([-1], np.int64)), True))
        return ops.divide(v, ops.maximum(length, ops.constant(np.float32(1e-12))))

    def linear(v, weight, bias):   # weight: a tensor_file.Dense of the head
        return ops.add(ops.matmul(v, stored(weight.matrix, weight.scale), False, True),
                       ops.constant(np.asarray(bias, np.float32)))

    sentence = unit(ops.reduce_mean(x, ops.constant(np.array([1], np.int64)), False))
    y = linear(sentence, head.w, head.b)
    if head.kind == "mlp":
        y = ops.add(y, linear(ops.relu(linear(sentence, head.w1, head.b1)), head.w2, head.b2))
    return ov.Model([x, sentence, unit(y)], [x_in])


def compile_graph(tensors, prefix: str, config: dict, head=None):
    import openvino as ov

    return ov.Core().compile_model(build(tensors, prefix, config, head), "CPU", SETTINGS)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


class QueryGraph:
    """The layers (and, given a head, the pooling and the head) for one sentence at a time: `run(x)` gives the
    graph's outputs once it is compiled, else None (the caller runs numpy). Thread-safe: one compile, one infer
    request per thread."""

    def __init__(self, tensors, prefix: str, config: dict, head=None):
        self._args = (tensors, prefix, config, head)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._thread: threading.Thread | None = None
        self.compiled = None
        self.failure: str | None = None   # why the graph could not be built (numpy answers every query)

    def _compile(self) -> None:
        try:
            self.compiled = compile_graph(*self._args)
        except Exception as e:  # noqa: BLE001 (an optimisation only: any failure leaves numpy answering)
            self.failure = _first_line(e)

    def start(self) -> None:
        """Compile on a thread (not a daemon: a process that ends meanwhile waits for it, never kills it mid-way)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._compile, name="imgtxt-query-graph")
                self._thread.start()

    def wait(self) -> None:
        """Until a started compile has finished (tests, benchmarks)."""
        self.start()
        self._thread.join()

    def run(self, x: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """For (1, T, hidden) embeddings: ((1, T, hidden) states,) or, with a head, (states, (1, hidden) sentence
        vector, (1, D) joint vector); None while the graph is not ready."""
        compiled = self.compiled
        if compiled is None:
            if self._thread is None and enabled():   # the first call starts the compile (start() runs it once)
                self.start()
            return None
        try:
            request = getattr(self._local, "request", None)
            if request is None:
                request = self._local.request = compiled.create_infer_request()
            out = request.infer({0: np.ascontiguousarray(x, np.float32)})
            # copied: an output is a view of the request's buffer, which its next inference overwrites
            return tuple(np.array(out[i]) for i in range(len(out)))
        except Exception as e:  # noqa: BLE001 (an optimisation only: numpy answers this query and every later one)
            self.failure = _first_line(e)
            self.compiled = None
            return None
