"""The embedding phase of `imgtxt index --ray ADDRESS` on a Ray cluster.

The driver (the `imgtxt index` process) scans, compares and hashes as always; only the photos to embed are
sharded: each chunk of `batch_size` photos goes to a Ray actor that decodes them (threads) and runs the
same CNN, FNE and projection as a local run. Results come back in the order of the list and are written
to the one SQLite store by the driver, one transaction per chunk, so a killed run keeps what was committed
and the rerun sees those photos as unchanged.

Workers read the photos by path: the folders must be visible at the same path on every node (NFS, a
mounted bucket). The model (its folder, including the CNN graph) travels through Ray's object store, so
nodes need imgtxt and its dependencies installed but not the model.
"""
from __future__ import annotations

import os
import tempfile
from collections import deque
from pathlib import Path

import numpy as np

from imgtxt.errors import ImgtxtError, install_hint

from .store import NO_VECTOR, encode_vector, usable_vector

LOCAL = "local"   # --ray local: start a Ray instance on this machine (tests, trying it out)


class ClusterError(ImgtxtError):
    """Ray is missing, or a worker failed: what committed so far is kept."""


class EmbedWorker:
    """One per Ray worker slot: holds the model and its CNN, embeds chunks of photos."""

    def __init__(self, model_files: dict[str, bytes], workers: int, threads: int, previews: bool = False):
        import shutil

        from imgtxt.model.cnn_runtime import onnx_embedder
        from imgtxt.model.modelfile import TrainedModel

        folder = Path(tempfile.mkdtemp(prefix="imgtxt-model-"))
        try:
            for name, data in model_files.items():
                (folder / name).write_bytes(data)
            self.model = TrainedModel.load(folder)
            self.embedder = onnx_embedder(self.model, threads=threads, export=False)
            if self.embedder is None:  # no ONNX runtime on this node: the torch path
                from imgtxt.model.cnn_torch import ImageEmbedder

                self.embedder = ImageEmbedder(self.model)
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # everything is loaded into memory by now
        self.workers, self.previews = workers, previews

    def embed(self, paths: list[str]) -> list:
        """photo paths -> [(vector bytes, width, height, content hash) or an error string], in order."""
        from imgtxt.model.images import ImageError, in_order

        from .photo_work import Work, decode

        works = [Work(path, 0, 0, None) for path in paths]

        size = self.embedder.resize_size
        results: list = [None] * len(works)
        decoded = []
        for i, (_, result) in enumerate(in_order(lambda w: decode(w, size, self.previews), works, self.workers, len(works))):
            if isinstance(result, ImageError):
                results[i] = str(result)
            else:
                decoded.append((i, result))
        if decoded:
            from imgtxt.model.cnn_runtime import one_blas_thread

            with one_blas_thread():
                vectors = self.embedder.embed(np.stack([square for _, (square, _, _) in decoded])).astype(np.float32)
            for (i, (_, width, height)), vector in zip(decoded, vectors):
                # float16, as a local run stores it; with the hash of the bytes decoded (photo_work.decode)
                results[i] = (encode_vector(vector), width, height, works[i].hash)
        return results


def folder_files(model) -> dict[str, bytes]:
    """Every file of the model folder (model.json, weights, the text kind's vocab.json or tokenizer.json,
    the caption bank): what TrainedModel.load reads differs by kind, so none is picked by name."""
    return {p.name: p.read_bytes() for p in Path(model.folder).iterdir() if p.is_file() and p.name != "cnn.onnx"}


def model_files(model) -> dict[str, bytes]:
    """The model folder's files for the workers, with the CNN graph (exported here if needed)."""
    from imgtxt.model.cnn_runtime import export_to_cache, graph_paths

    files = folder_files(model)
    graph = next((p for p in graph_paths(model) if p.is_file()), None) or export_to_cache(model)
    if graph is not None:
        files["cnn.onnx"] = Path(graph).read_bytes()
    return files


PROBE_TIMEOUT_S = 5.0   # ray.init retries an unreachable address for minutes; a TCP probe answers in seconds


def probe(address: str) -> None:
    """A ClusterError line at once when a host:port (or ray://host:port) address does not accept connections."""
    import socket
    from urllib.parse import urlsplit

    if address in (LOCAL, "auto"):
        return
    try:   # a stray "[" is an unclosed IPv6 literal to urlsplit; a port out of range is a ValueError too
        target = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = target.hostname, target.port
    except ValueError:
        host = port = None
    if not host or port is None:
        raise ClusterError(f"--ray {address!r}: expected host:port, ray://host:port, auto or local")
    try:   # the resolver encodes the name as IDNA: a label over 63 characters is a UnicodeError there
        host.encode("idna")
    except UnicodeError:
        raise ClusterError(f"--ray {address!r}: {host!r} is not a host name") from None
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ClusterError(f"cannot reach Ray at {address!r}: {reason}") from None


def connect(address: str):
    probe(address)
    import ray

    if not ray.is_initialized():
        if address == LOCAL:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    return ray


def embed_on_ray(run, to_embed: list, address: str, cpus_per_worker: int = 1, in_flight: int = 2) -> None:
    """IndexRun.embed on Ray: same writes, same per-chunk commits, same summary counts."""
    try:
        ray = connect(address)
    except ImportError:
        raise ClusterError(f"--ray needs the ray package: {install_hint('ray')}") from None
    except ClusterError:
        raise
    except Exception as e:  # noqa: BLE001 (ray.init raises ConnectionError, ValueError, RuntimeError, ...)
        reason = (str(e).strip().splitlines() or [e.__class__.__name__])[0]
        raise ClusterError(f"cannot start or reach Ray at {address!r}: {reason[:300]}") from None
    try:
        _embed_chunks(ray, run, to_embed, cpus_per_worker, in_flight)
    except ray.exceptions.RayError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = lines[-1] if lines else e.__class__.__name__   # the worker's own exception comes last
        raise ClusterError(f"a Ray worker failed: {reason[:300]}; {run.summary.embedded} photos embedded and "
                           f"saved before it; run `imgtxt index` again to continue") from None


def _embed_chunks(ray, run, to_embed: list, cpus_per_worker: int, in_flight: int) -> None:
    slots = max(1, int(ray.available_resources().get("CPU", 1)) // cpus_per_worker)
    chunks = [to_embed[s:s + run.batch_size] for s in range(0, len(to_embed), run.batch_size)]
    actor_class = ray.remote(num_cpus=cpus_per_worker)(EmbedWorker)
    files = ray.put(model_files(run.model))
    actors = [actor_class.remote(files, max(1, cpus_per_worker), cpus_per_worker, run.previews)
              for _ in range(min(slots, len(chunks)))]
    pending: deque = deque()
    next_chunk = 0
    try:
        while next_chunk < len(chunks) or pending:
            # keep every actor busy with up to `in_flight` chunks; collect strictly in list order
            while next_chunk < len(chunks) and len(pending) < in_flight * len(actors):
                actor = actors[next_chunk % len(actors)]
                chunk = chunks[next_chunk]
                pending.append((chunk, actor.embed.remote([w.path for w in chunk])))
                next_chunk += 1
            chunk, future = pending.popleft()
            for w, result in zip(chunk, ray.get(future)):
                if isinstance(result, str):
                    run.skip(w, result)
                    continue
                vector, width, height, w.hash = result
                if not usable_vector(vector):
                    run.skip(w, NO_VECTOR)
                    continue
                run.count_added_or_updated(w)
                run.writes.append(lambda w=w, wd=width, ht=height, v=vector: run.store.put_photo(
                    w.path, w.size, w.mtime_ns, w.hash, wd, ht, v, run.model_id, w.stamp))
                run.summary.embedded += 1
            run.commit()  # one transaction per chunk, as in a local run
    finally:
        for actor in actors:
            ray.kill(actor)
