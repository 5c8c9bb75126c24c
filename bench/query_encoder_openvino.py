"""MiniLM's six layers as an OpenVINO graph built from the model's stored weights, against the numpy encoder a search
runs, on the same new sentences (one thread each; what a warm query's encoder could cost on another runtime).

    OMP_NUM_THREADS=1 .venv/bin/python bench/query_encoder_openvino.py [--model weights/default] [--queries 200]

Each way runs in its own process (so its memory is its own), after 20 warm-up sentences:
  numpy        the encoder's numpy layers (int8 column blocks cast to float32, tensor_file.Dense), what a
               one-shot search runs (IMGTXT_QUERY_GRAPH=0 here: a warm process's queries take int8-dynamic);
  int8-dq      the int8 matrices as OpenVINO compressed weights (int8 x per-row scale), its CPU plugin's default
               dynamic quantisation of the activations on;
  int8         the same with DYNAMIC_QUANTIZATION_GROUP_SIZE 0: float32 activations;
  ...-dynamic  each of those compiled once with a dynamic token count instead of once per count.
A static graph is compiled for each token count met (the sentences here have 7). Printed per way: the layers' CPU
and wall ms a query (p50), the largest hidden-state difference from numpy's and the largest 1 - cosine of the
mean-pooled states, and the process's peak RSS. The embeddings, pooling and head stay in numpy in every way.

    OMP_NUM_THREADS=1 .venv/bin/python bench/query_encoder_openvino.py --agreement ../shared/data/flickr8k

instead encodes each of Flickr8k val's 5,000 captions as a search query, once by numpy and once with the
int8-dq-dynamic layers (with --product: the graph as a warm search compiles it, minilm_graph.SETTINGS), and
ranks the 1,000 val photos (as an index stores them) with each: t2i R@1/5/10 of both, and for how many captions
the top photo, the top 10 as a set and the top 10 in order are the same.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["IMGTXT_QUERY_GRAPH"] = "0"   # the runtime's own layers stay numpy: the graphs here are built apart

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from warm_search import sentences

WAYS = ("numpy", "int8-dq", "int8", "int8-dq-dynamic", "int8-dynamic")


def build_graph(runtime):
    """The layers as an openvino.Model over (1, T, 384) embeddings (T dynamic): the graph a warm process's
    queries use (imgtxt/model/text_encoders/minilm_graph.py)."""
    from imgtxt.model.text_encoders import minilm, minilm_graph

    return minilm_graph.build(runtime.tensors, minilm.PREFIX, runtime.config)


def embed(runtime, tokens: list[int]) -> np.ndarray:
    """(1, T, 384): hidden_states' first step for one sentence, as the numpy encoder does it."""
    from imgtxt.model.text_encoders import minilm

    used = np.array(sorted(set(tokens)), np.int64)
    words = runtime.tensors.rows(minilm.PREFIX + "embeddings.word_embeddings.weight", used)
    e = (words[np.searchsorted(used, np.array([tokens]))]
         + runtime._w("embeddings.position_embeddings.weight")[:len(tokens)]
         + runtime._w("embeddings.token_type_embeddings.weight")[0])
    return minilm.layer_norm(e, runtime._w("embeddings.LayerNorm.weight"), runtime._w("embeddings.LayerNorm.bias"),
                             runtime.config["layer_norm_eps"])


def run_way(way: str, model_dir: str | None, queries: int) -> dict:
    from threadpoolctl import threadpool_limits

    from imgtxt.model.modelfile import TrainedModel, default_model_dir

    model = TrainedModel.load(Path(model_dir) if model_dir else default_model_dir())
    runtime = model.text
    tokens = [runtime.tokenize(q) for q in sentences(queries + 20)]

    layers = lambda t: runtime.hidden_states([t])[0][0]
    if way != "numpy":
        import openvino as ov

        graph, core = build_graph(runtime), ov.Core()
        settings = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}
        if "dq" not in way:
            settings["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
        compiled: dict = {}

        def request(n):
            key = 0 if way.endswith("dynamic") else n
            if key not in compiled:
                g = graph
                if key:
                    g = graph.clone()
                    g.reshape({0: [1, n, 384]})
                compiled[key] = core.compile_model(g, "CPU", settings).create_infer_request()
            return compiled[key]

        layers = lambda t: request(len(t)).infer({0: embed(runtime, t)})[0][0]
    cpu, wall, states = [], [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for t in tokens[:20]:
            layers(t)
        for t in tokens[20:]:
            c, w = time.process_time(), time.perf_counter()
            states.append(np.array(layers(t)))
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
        reference = [runtime.hidden_states([t])[0][0] for t in tokens[20:]]
    diff = max(float(np.abs(s - r).max()) for s, r in zip(states, reference))
    cos = max(float(1 - (s.mean(0) @ r.mean(0)) / np.linalg.norm(s.mean(0)) / np.linalg.norm(r.mean(0)))
              for s, r in zip(states, reference))
    return {"way": way, "cpu_p50_ms": round(1e3 * float(np.median(cpu)), 2),
            "wall_p50_ms": round(1e3 * float(np.median(wall)), 2), "max_state_diff": diff,
            "max_pooled_1_minus_cos": cos, "token_counts": len({len(t) for t in tokens}),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def agreement(model_dir: str | None, data_dir: str, product: bool = False) -> dict:
    import openvino as ov
    from threadpoolctl import threadpool_limits

    from imgtxt.model import search_tuning
    from imgtxt.model.modelfile import TrainedModel, default_model_dir
    from imgtxt.research.calibrate import split_vectors
    from imgtxt.research.datasets import load_split
    from imgtxt.research.metrics import evaluate_scores

    model = TrainedModel.load(Path(model_dir) if model_dir else default_model_dir())
    runtime = model.text
    photos, _ = split_vectors(model, "flickr8k", data_dir, "val", quiet=True)
    captions = load_split("flickr8k", data_dir, "val", check_images=False).captions
    from imgtxt.model.text_encoders import minilm_graph

    settings = dict(minilm_graph.SETTINGS) if product else {
        "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    request = ov.Core().compile_model(build_graph(runtime), "CPU", settings).create_infer_request()

    def openvino_layers(token_lists, layers=None):   # one sentence at a time, as a search encodes its query
        (t,) = token_lists
        return request.infer({0: embed(runtime, t)})[0].copy(), np.ones((1, len(t)), bool)

    with threadpool_limits(limits=1, user_api="blas"):
        numpy_way = np.vstack([search_tuning.gate_queries(model, model.encode_text([c])) for c in captions])
        runtime.hidden_states = openvino_layers
        openvino_way = np.vstack([search_tuning.gate_queries(model, model.encode_text([c])) for c in captions])
    out = {"captions": len(captions)}
    tops = []
    for name, queries in (("numpy", numpy_way), ("openvino_product" if product else "openvino_int8_dq", openvino_way)):
        scores = photos @ queries.T
        t2i = evaluate_scores(scores, 5)["t2i"]
        out[name + "_t2i"] = [round(float(t2i[k]), 2) for k in ("r1", "r5", "r10")]
        tops.append(np.argsort(-scores.T, axis=1, kind="stable")[:, :10])
    out["same_top1"] = round(float(np.mean(tops[0][:, 0] == tops[1][:, 0])), 4)
    out["same_top10_set"] = round(float(np.mean([set(a) == set(b) for a, b in zip(*tops)])), 4)
    out["same_top10_order"] = round(float(np.mean((tops[0] == tops[1]).all(axis=1))), 4)
    out["max_score_diff"] = float(np.abs(photos @ numpy_way.T - photos @ openvino_way.T).max())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)   # one way in this process
    ap.add_argument("--agreement", metavar="FLICKR8K_DIR", help="rank Flickr8k val by both ways instead")
    ap.add_argument("--product", action="store_true",
                    help="with --agreement: the graph as a warm search compiles it (float32 activations)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.agreement:
        print(json.dumps(agreement(args.model, args.agreement, args.product), indent=None if args.json else 1))
        return
    if args.way:
        print(json.dumps(run_way(args.way, args.model, args.queries)))
        return
    rows = []
    for way in WAYS:
        cmd = [sys.executable, __file__, "--way", way, "--queries", str(args.queries)]
        if args.model:
            cmd += ["--model", args.model]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'way':<16}{'CPU p50':>9}{'wall p50':>10}{'max state diff':>16}{'1 - cos pooled':>16}{'peak RSS':>10}")
    for r in rows:
        print(f"{r['way']:<16}{r['cpu_p50_ms']:>7.2f}ms{r['wall_p50_ms']:>8.2f}ms{r['max_state_diff']:>16.1e}"
              f"{r['max_pooled_1_minus_cos']:>16.1e}{r['peak_rss_mb']:>7} MB")


if __name__ == "__main__":
    main()
