"""`imgtxt caption` of the same photos with several models side by side (to compare caption banks by eye).

    python bench/caption_banks.py --model weights/default --model WORLD_DIR [-n 3] PHOTO_OR_FOLDER...

Each photo (a folder stands for its .jpg/.jpeg/.png files, sorted) is captioned through `imgtxt.Library.caption`
by every model, with an empty index folder so that nothing indexed elsewhere is read; the top `n` captions of
each model are printed under the photo's name, with the level `caption` gives them. `--json` prints one object
per photo instead. Photos come from examples/ and the object dev set (`python bench/object_devset.py --copy-only
--photos DIR`); their licences are in examples/LICENSES.md and the dev set's MANIFEST.tsv.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

SUFFIXES = (".jpg", ".jpeg", ".png")


def photos_of(paths: list[Path]) -> list[Path]:
    out = []
    for path in paths:
        out += sorted(p for p in path.iterdir() if p.suffix.lower() in SUFFIXES) if path.is_dir() else [path]
    return out


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from imgtxt import Library

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photos", nargs="+", type=Path)
    parser.add_argument("--model", action="append", type=Path, required=True, help="model folder; repeat")
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    photos = photos_of(args.photos)
    with tempfile.TemporaryDirectory() as empty:
        libraries = [Library(index_dir=empty, model=m) for m in args.model]
        for photo in photos:
            rows = {str(m): [(c.text, c.level) for c in lib.caption(photo, n=args.n)]
                    for m, lib in zip(args.model, libraries)}
            if args.json:
                print(json.dumps({"photo": photo.name, "captions": rows}))
                continue
            print(photo.name)
            for model, captions in rows.items():
                for i, (text, level) in enumerate(captions):
                    print(f"  {Path(model).name if i == 0 else '':<14} {i + 1}. {text} ({level})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
