"""A 1M-photo library on one machine: CPU seconds and peak memory of a no-change `imgtxt index` rerun and of a
run that adds 1%, and the full vector index build.

    .venv/bin/python bench/million.py [--size 1000000] [--root /dev/shm/imgtxt-million]
        [--page-size 4096]    # SQLite's default page size instead of imgtxt's, for comparison

Embedding a million photos would take days of CNN, so the library is written directly: SIZE small files under
--root (1,000 per folder, each with distinct bytes, named .jpg) and an index whose rows carry their real size,
mtime and content hash (imgtxt's own `file_hash`, so copies are recognised), and float16 vectors drawn from a
Gaussian mixture fitted to the shipped model's Flickr8k photo vectors (bench/real_vectors.py), written with the
library's Store; the vector files are then built by the library's own `vector_build.sync`. Then, as subprocesses,
the installed `imgtxt index ROOT` command (peak RSS and CPU = user + sys, by GNU time):
  1. a rerun with nothing changed: must open no photo and rewrite no vector file (mtime checked);
  2. a run after adding 1% new files (copies of indexed photos' bytes, so their vectors are reused without the
     CNN): shows what the vector index does with them.
Everything lives under --root and is deleted at the end (--keep keeps it).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_vectors import REPO, WORK, FittedMixture, load_model, photo_vectors  # noqa: E402

from imgtxt.library.photo_work import file_hash  # noqa: E402

PER_FOLDER = 1000


def content(i: int) -> bytes:
    return b"not really a photo %09d\n" % i


def write_files(root: Path, start: int, stop: int, name=lambda i: f"{i:09}.jpg", source=content) -> list:
    rows = []
    for i in range(start, stop):
        folder = root / f"{i // PER_FOLDER:06}"
        if i % PER_FOLDER == 0 or i == start:
            folder.mkdir(parents=True, exist_ok=True)
        path = folder / name(i)
        data = source(i)
        path.write_bytes(data)
        st = path.stat()
        rows.append((str(path), st.st_size, st.st_mtime_ns, file_hash(str(path))))
    return rows


def build_library(root: Path, index_dir: Path, size: int, model, work: Path, page_size: int | None) -> None:
    from imgtxt.library import vector_build
    from imgtxt.library.store import Store, now_iso, now_precise

    mixture = FittedMixture(np.concatenate([photo_vectors(model, work, "train"), photo_vectors(model, work, "val")]))
    dim = model.vector_dim   # the joint space plus the ConSE part and the hubness coordinate
    if page_size:  # an existing database keeps its page size: create it first with the one asked for
        index_dir.mkdir(parents=True)
        with sqlite3.connect(index_dir / "index.db") as conn:
            conn.execute(f"PRAGMA page_size={int(page_size)}")
            conn.execute("PRAGMA journal_mode=WAL")
    store = Store(index_dir)
    t = time.perf_counter()
    for start in range(0, size, 50_000):
        stop = min(size, start + 50_000)
        files = write_files(root / "photos", start, stop)
        vectors = mixture.sample(stop - start, seed=start).astype(np.float16)
        with store.db.atomic():
            store.db.conn.executemany(
                "INSERT INTO photos (path, size, mtime_ns, hash, width, height, embedding, model_id, indexed_at) "
                "VALUES (?, ?, ?, ?, 4000, 3000, ?, ?, ?)",
                ((p, s, m, h, v.tobytes(), model.model_id, now_precise()) for (p, s, m, h), v in zip(files, vectors)))
        print(f"  wrote {stop:,} photos ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    store.set_meta(model_id=model.model_id, model_folder=str(Path(model.folder).resolve()),
                   similarity=model.similarity_kind, embed_dim=dim, last_run=now_iso(), photos=size)
    t, c = time.perf_counter(), time.process_time()
    synced = vector_build.sync(store, model.model_id, dim, model.similarity_kind)
    print(f"full vector index build of {size:,} photos: {time.perf_counter() - t:.1f} s ({time.process_time() - c:.1f} "
          f"s CPU in this process): {synced.line()}")
    pages = store.db.execute("PRAGMA page_size").fetchone()[0]
    store.close()
    db = index_dir / "index.db"
    wal = Path(str(db) + "-wal")
    print(f"index.db {db.stat().st_size / 1e9:.2f} GB in {pages // 1024} KB pages "
          f"(WAL {wal.stat().st_size / 1e9 if wal.exists() else 0:.2f} GB); "
          f"vector files {sum(p.stat().st_size for p in index_dir.glob('vectors-*')) / 1e9:.2f} GB")


def measured_run(args: list[str], scratch: Path) -> tuple[dict, float, float, float]:
    """(summary, CPU s = user + sys, peak RSS MB, wall s) of one `imgtxt ...` subprocess, by GNU time."""
    report = scratch / "time.txt"
    proc = subprocess.run(["/usr/bin/time", "-f", "%U %S %M %e", "-o", str(report),
                           str(REPO / ".venv" / "bin" / "imgtxt"), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"imgtxt {' '.join(args)} failed: {proc.stderr}")
    user, system, rss_kb, wall = map(float, report.read_text().split()[-4:])
    return json.loads(proc.stdout), user + system, rss_kb / 1024, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--root", type=Path, default=Path("/dev/shm/imgtxt-million"))
    ap.add_argument("--work", type=Path, default=WORK, help=f"working folder, kept between runs for its cached vectors (default: {WORK})")
    ap.add_argument("--model", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--page-size", type=int, default=None,
                    help="SQLite page size of the new index (default: imgtxt's own; 4096 is SQLite's default)")
    args = ap.parse_args()

    model = load_model(args.model)
    root, index_dir = args.root, args.root / "index"
    shutil.rmtree(root, ignore_errors=True)
    try:
        build_library(root, index_dir, args.size, model, args.work, args.page_size)
        command = ["index", str(root / "photos"), "--index", str(index_dir), "--model", str(model.folder),
                   "--json", "--quiet"]
        vector_files = {p.name: p.stat().st_mtime_ns for p in index_dir.glob("vectors-*")}
        print(f"\n`imgtxt {' '.join(command)}`")
        summary, cpu, rss, wall = measured_run(command, root)
        same = {p.name: p.stat().st_mtime_ns for p in index_dir.glob("vectors-*")} == vector_files
        print(f"1. no-change rerun of {args.size:,} photos: {cpu:.1f} s CPU, peak RSS {rss:.0f} MB, wall {wall:.1f} s; "
              f"unchanged {summary['unchanged']:,}, embedded {summary['embedded']}; "
              f"vector files {'not rewritten (same mtime)' if same else 'REWRITTEN'}; {summary['vector_index']}")

        extra = args.size // 100  # +1%: new paths holding bytes of indexed photos (reused vectors, no CNN)
        write_files(root / "photos" / "new", 0, extra, name=lambda i: f"copy-{i:09}.jpg",
                    source=lambda i: content((i * 7919) % args.size))
        summary, cpu, rss, wall = measured_run(command, root)
        print(f"2. +1% run ({extra:,} new files): {cpu:.1f} s CPU, peak RSS {rss:.0f} MB, wall {wall:.1f} s; "
              f"added {summary['added']:,}, embedded {summary['embedded']}; {summary['vector_index']}")
        summary, cpu, rss, wall = measured_run(command, root)
        print(f"3. no-change rerun after it: {cpu:.1f} s CPU, peak RSS {rss:.0f} MB, wall {wall:.1f} s; "
              f"{summary['vector_index']}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f} (1 min), "
          f"{os.getloadavg()[1]:.1f} (5 min); files and index on {args.root}")


if __name__ == "__main__":
    main()
