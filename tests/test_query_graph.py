"""A warm process's queries through MiniLM's OpenVINO graph (text_encoders/minilm_graph.py): the same states as
numpy's layers, built only from a process's second sentence, per thread, and never in the way of an answer."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from imgtxt.model.modelfile import TrainedModel, default_model_dir
from imgtxt.model.text_encoders import minilm, minilm_graph

SENTENCES = ["a dog running on the beach", "two children playing in a snowy field", "a cup of coffee",
             "a man in a red shirt riding a bicycle through the park", "x"]


@pytest.fixture()
def text():
    model = TrainedModel.load(default_model_dir())
    if not isinstance(model.text, minilm.Runtime):
        pytest.skip("the shipped model's text encoder is not MiniLM")
    return model.text


def numpy_only(runtime, call):
    """call() with the numpy layers alone, whatever the graph's state."""
    graph, runtime.query_graph = runtime.query_graph, None
    calls, runtime._single_calls = runtime._single_calls, -10**9
    try:
        return call()
    finally:
        runtime.query_graph, runtime._single_calls = graph, calls


def numpy_states(runtime, tokens):
    return numpy_only(runtime, lambda: runtime.hidden_states([tokens])[0])


def test_the_graph_gives_numpys_states_sentence_vectors_and_query_vectors(text):
    tokens = [text.tokenize(s) for s in SENTENCES]
    first = [text.encode([t]) for t in tokens[:2]]      # numpy; the second call starts the graph's compile
    assert text.query_graph is not None
    # the rest by numpy too, whenever the compile ends (on a fast machine it may end before a third call)
    before = first + [numpy_only(text, lambda t=t: text.encode([t])) for t in tokens[2:]]
    text.query_graph.wait()
    assert text.query_graph.failure is None and text.query_graph.compiled is not None
    assert any(d.kept_bytes for d in text._matrices.values())     # numpy's small-batch blocks, kept ...
    text.encode([tokens[0]])
    assert not any(d.kept_bytes for d in text._matrices.values())  # ... and let go once the graph answers
    assert not any(d.kept_bytes for d in text.head.matrices)     # the head's too: the graph runs it
    for t, vector in zip(tokens, before):
        graph_states, graph_sentence, graph_joint = text.query_graph.run(text_embeddings(text, t))
        assert graph_states.shape == (1, len(t), minilm.ARCH["hidden"])
        assert np.abs(graph_states - numpy_states(text, t)).max() < 1e-4
        joint, sentence = numpy_only(text, lambda t=t: text.encode_with_sentence([t]))
        assert graph_sentence.shape == sentence.shape and graph_joint.shape == joint.shape == vector.shape
        assert np.abs(graph_sentence - sentence).max() < 1e-5 and np.abs(graph_joint - joint).max() < 1e-5
        assert np.abs(text.encode([t]) - vector).max() < 1e-5   # through the graph now
        np.testing.assert_array_equal(text.encode_with_sentence([t])[1], graph_sentence)


def test_the_graph_without_a_head_gives_the_states_alone(text):
    graph = minilm_graph.QueryGraph(text.tensors, minilm.PREFIX, text.config)
    graph.wait()
    tokens = text.tokenize("a dog running on the beach")
    out = graph.run(text_embeddings(text, tokens))
    assert len(out) == 1 and np.abs(out[0] - numpy_states(text, tokens)).max() < 1e-4


def text_embeddings(runtime, tokens):
    """The layers' input for one sentence."""
    return runtime._embeddings([tokens])[0]


def test_a_one_shot_search_never_builds_the_graph(text):
    text.encode([text.tokenize("a dog")])
    assert text.query_graph is None                       # not even imported for it
    text.encode([text.tokenize("a dog"), text.tokenize("a cat")])   # batches (caption banks) stay numpy
    text.encode([text.tokenize("a cat on a sofa")])
    assert text.query_graph is not None


def test_the_switch_keeps_numpy(text, monkeypatch):
    monkeypatch.setenv(minilm_graph.ENV, "0")
    for s in SENTENCES:
        text.encode([text.tokenize(s)])
    assert text.query_graph is not None and text.query_graph.compiled is None
    assert text.query_graph._thread is None


def test_a_graph_that_cannot_be_built_leaves_numpy_answering(text, monkeypatch):
    def broken(*args):
        raise RuntimeError("no CPU plugin\nsecond line")
    monkeypatch.setattr(minilm_graph, "compile_graph", broken)
    tokens = text.tokenize("a dog running on the beach")
    first = text.encode([tokens])
    text.encode([text.tokenize("a cat")])
    text.query_graph.wait()
    assert text.query_graph.failure == "no CPU plugin" and text.query_graph.compiled is None
    np.testing.assert_allclose(text.encode([tokens]), first, atol=1e-6)   # numpy, kept blocks: float rounding


def test_each_thread_has_its_own_request(text):
    text.encode([text.tokenize("a")])
    text.encode([text.tokenize("b")])
    text.query_graph.wait()
    tokens = [text.tokenize(s) for s in SENTENCES]
    expected = [text.encode([t]) for t in tokens]

    class Counting:   # how many requests the threads make
        def __init__(self, compiled):
            self.compiled, self.made = compiled, 0

        def create_infer_request(self):
            self.made += 1
            return self.compiled.create_infer_request()

    text.query_graph.compiled = counting = Counting(text.query_graph.compiled)
    out: dict = {}

    def work(i):
        out[i] = [text.encode([t]) for t in tokens * 5]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for results in out.values():
        for got, want in zip(results, expected * 5):
            np.testing.assert_array_equal(got, want)
    assert counting.made == 3


def test_a_graph_that_fails_to_run_hands_the_query_back_to_numpy(text):
    tokens = text.tokenize("a dog running on the beach")
    text.encode([text.tokenize("a")])
    text.encode([text.tokenize("b")])
    text.query_graph.wait()
    expected = text.encode([tokens])                                       # through the graph

    class Broken:
        def infer(self, inputs):
            raise RuntimeError("Exception from src/inference/src/infer_request.cpp\nmore")

    text.query_graph._local.request = Broken()
    np.testing.assert_allclose(text.encode([tokens]), expected, atol=1e-5)   # answered, by numpy
    assert text.query_graph.failure.startswith("Exception from") and text.query_graph.compiled is None
    np.testing.assert_allclose(text.encode([tokens]), expected, atol=1e-5)   # and numpy from then on


@pytest.mark.parametrize("head", ["linear", "mlp"])
def test_the_graph_runs_either_head_from_float32_weights(tmp_path, head):
    # a small random MiniLM-kind encoder whose tensors are float32 (no int8 rows): the other way dense() reads them
    from test_text_encoders import random_minilm

    _, runtime = random_minilm(tmp_path, head=head)
    graph = minilm_graph.QueryGraph(runtime.tensors, minilm.PREFIX, runtime.config, runtime.head)
    graph.wait()
    assert graph.failure is None
    for sentence in SENTENCES:
        tokens = runtime.tokenize(sentence)
        states, sentence_vector, joint = graph.run(text_embeddings(runtime, tokens))
        want_joint, want_sentence = numpy_only(runtime, lambda t=tokens: runtime.encode_with_sentence([t]))
        assert np.abs(states - numpy_states(runtime, tokens)).max() < 1e-4
        assert np.abs(sentence_vector - want_sentence).max() < 1e-5 and np.abs(joint - want_joint).max() < 1e-5
