"""Do features from a camera JPEG's embedded preview match those from its main picture?

    .venv/bin/python bench/preview_agreement.py [--data-dir ../shared/data/flickr8k] [--photos-dir DIR] [--limit N]

Flickr8k val, re-encoded as camera JPEGs: each image upscaled to ~12 MP (quality 90) with an MPF "large
thumbnail" preview of 1616 px on its long side, written once into --photos-dir (a temporary folder; never
commit it). Then, through the index path:
- FNE agreement: the index's decode (main picture at draft scale vs the preview), the model's CNN graph, the
  discretized FNE: share of identical entries and of flipped signs;
- val rsum of the vectors `imgtxt index` stores (float16) with and without --previews, beside the original
  Flickr8k files; decode CPU ms per photo both ways.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

PREVIEW_LONG_SIDE = 1616


def camera_copy(source: Path, target: Path, megapixels: float = 12.0) -> None:
    from camera_files import write_mpf_jpeg
    from PIL import Image

    with Image.open(source) as im:
        im = im.convert("RGB")
        scale = (megapixels * 1e6 / (im.width * im.height)) ** 0.5
        main = im.resize((round(im.width * scale), round(im.height * scale)), Image.BICUBIC)
    p = PREVIEW_LONG_SIDE / max(main.size)
    preview = main.resize((round(main.width * p), round(main.height * p)), Image.LANCZOS)
    tmp = target.with_suffix(".tmp")
    write_mpf_jpeg(tmp, main, preview)
    os.replace(tmp, target)


def stored_vectors(index_dir: Path, paths: list[Path], dim: int) -> np.ndarray:
    from imgtxt.library.store import decode_vectors

    conn = sqlite3.connect(index_dir / "index.db")
    rows = dict(conn.execute("SELECT path, embedding FROM photos").fetchall())
    conn.close()
    return decode_vectors([rows[str(p)] for p in paths], dim).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "flickr8k"))
    ap.add_argument("--photos-dir", default=str(Path(tempfile.gettempdir()) / "imgtxt-flickr8k-val-12mp"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--limit", type=int, default=None,
                    help="first N val images only (their rsum is not comparable with the 1,000-image val rsum)")
    args = ap.parse_args()

    from imgtxt.library.indexer import run_index
    from imgtxt.library.photo_work import Work, decode
    from imgtxt.model.fne import full_network_embedding
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.datasets import CAPTIONS_PER_IMAGE, load_split
    from imgtxt.research.evaluate import search_and_caption_scores

    model = TrainedModel.load(args.model)
    split = load_split("flickr8k", args.data_dir, "val")
    sources = [Path(p) for p in split.image_paths][:args.limit]
    folder = Path(args.photos_dir)
    folder.mkdir(parents=True, exist_ok=True)
    photos = [folder / f"val_{i:04}.jpg" for i in range(len(sources))]
    start = time.perf_counter()
    for source, photo in zip(sources, photos):
        if not photo.is_file():
            camera_copy(source, photo)
    mb = sum(p.stat().st_size for p in photos) / len(photos) / 1e6
    print(f"{len(photos)} val images as ~12-MP JPEGs with a {PREVIEW_LONG_SIDE}-px MPF preview, {mb:.1f} MB each "
          f"({time.perf_counter() - start:.0f} s to make or find); load {os.getloadavg()[0]:.1f}", flush=True)

    embedder = model.image_embedder()
    size = embedder.resize_size
    raw, decode_ms = {}, {}
    for previews in (False, True):
        squares, cpu = [], time.process_time()
        for p in photos:
            result = decode(Work(str(p), 0, 0, None), size, previews)
            if isinstance(result, Exception):
                raise SystemExit(f"{p}: {result}")
            squares.append(result[0])
        decode_ms[previews] = 1000 * (time.process_time() - cpu) / len(photos)
        squares = np.stack(squares)
        raw[previews] = np.concatenate([embedder.extractor.raw_features(squares[s:s + 32])
                                        for s in range(0, len(squares), 32)])
    a, b = (full_network_embedding(raw[k], model.stats) for k in (False, True))
    print(f"decode (one thread, CPU): main picture at draft scale {decode_ms[False]:.1f} ms/photo, preview "
          f"{decode_ms[True]:.1f} ms/photo")
    print(f"discretized FNE, preview vs main picture: {100 * np.mean(a == b):.2f}% identical, "
          f"{100 * np.mean(np.abs(a.astype(int) - b) == 2):.3f}% flipped sign; raw mean abs diff "
          f"{np.abs(raw[True] - raw[False]).mean():.3e}", flush=True)

    dim = model.vector_dim   # the joint space plus the ConSE part and the hubness coordinate
    # --limit: the first N images and their captions (an rsum on N images: compare the rows, not with the val rsum)
    texts = split.captions[:len(photos) * CAPTIONS_PER_IMAGE]
    captions = model.encode_text(texts)

    def rsum(vectors) -> str:   # scored as `imgtxt eval` scores (search through the model's query encoding)
        r = search_and_caption_scores(model, vectors, texts, captions)
        return f"rsum {r['rsum']:.2f} (i2t R@1 {r['i2t']['r1']:.1f}, t2i R@1 {r['t2i']['r1']:.1f})"

    with tempfile.TemporaryDirectory() as tmp:
        originals = folder.parent / (folder.name + "-originals")   # the Flickr8k files through the same path
        originals.mkdir(exist_ok=True)
        links = []
        for i, source in enumerate(sources):
            link = originals / f"val_{i:04}.jpg"
            if not link.exists():
                link.unlink(missing_ok=True)         # a dangling link of an earlier run
                link.symlink_to(Path(source).resolve())   # a relative --data-dir would dangle from this folder
            links.append(link)
        for name, root, files, previews in (("original Flickr8k files", originals, links, False),
                                            ("12-MP main picture", folder, photos, False),
                                            ("12-MP with --previews", folder, photos, True)):
            index_dir = Path(tmp) / name.replace(" ", "-")
            cpu = time.process_time()
            run_index(index_dir, [str(root)], model, log=lambda m: None, previews=previews)
            seconds = time.process_time() - cpu
            print(f"{name:<24} {len(files)} images: {rsum(stored_vectors(index_dir, files, dim))}; index {1000 * seconds / len(files):.1f} "
                  f"ms CPU/photo (this process)", flush=True)
    print(f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
