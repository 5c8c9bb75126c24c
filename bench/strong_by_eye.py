"""How many of the top results the mixed benchmark counts wrong are wrong to the eye: a seeded sample of one query
kind's `strong` top results whose photo is not the query's own, printed with the photo that came first, and
drawn as numbered contact sheets (12 photos each) to judge by eye.

    python bench/strong_by_eye.py --data-dir ../shared/data/flickr8k [--model DIR] [--kind caption]
                                  [--sample 24] [--seed 7] [--sheets DIR] [--work DIR]

A caption is right for its own photo alone (bench/mixed_library.py), so a strong top result that shows what the
caption says, in another photo, counts against the confidence. The judgement is the reader's; the script only
makes the sample reproducible. The levels are the model's own (its per-query search confidence).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_library  # noqa: E402  (the gallery's photos and the queries file)

SHEET_SIDE = 4, 3   # photos across, down
CELL = 300


def strong_wrong(bench, level, kind: str) -> tuple[int, int, list[tuple[int, int]]]:
    """(queries of `kind`, their strong top results, [(query, top photo)] of those not among the query's right
    photos). `level(query, score)` is the level of a query's score."""
    strong, wrong, total = 0, [], 0
    for q, k in enumerate(bench.kinds):
        if k != kind:
            continue
        total += 1
        top = int(np.argmax(bench.scores[q]))
        if level(q, bench.scores[q, top]) == "strong":
            strong += 1
            if top not in bench.right[q]:
                wrong.append((q, top))
    return total, strong, wrong


def draw_sheets(paths: list[Path], folder: Path) -> list[Path]:
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    across, down = SHEET_SIDE
    per_sheet, out = across * down, []
    for s in range(0, len(paths), per_sheet):
        sheet = Image.new("RGB", (across * CELL, down * CELL), "white")
        draw = ImageDraw.Draw(sheet)
        for k, path in enumerate(paths[s:s + per_sheet]):
            x, y = (k % across) * CELL, (k // across) * CELL
            with Image.open(path) as im:
                sheet.paste(im.convert("RGB").resize((CELL - 10, CELL - 10)), (x + 5, y + 5))
            draw.rectangle([x + 5, y + 5, x + 40, y + 30], fill="yellow")
            draw.text((x + 10, y + 10), str(s + k), fill="black")
        out.append(folder / f"sheet-{s // per_sheet}.png")
        sheet.save(out[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--kind", default="caption", choices=["caption", "phrase", "object", "photo-of"])
    parser.add_argument("--sample", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sheets", type=Path, help="write numbered contact sheets of the sampled photos here")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "imgtxt-mixed-library")
    mixed_library.add_caltech_option(parser)
    args = parser.parse_args()
    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research import search_confidence_fit as fitting
    from imgtxt.research.datasets import load_split

    photos, queries = mixed_library.prepare(args.work, args.data_dir, "strong_by_eye", args.caltech)
    model = TrainedModel.load(args.model)
    bench, calibration, rated_by = mixed_library.rated_bench(model, args.data_dir, photos, queries)
    if rated_by != "per-query search confidence":
        raise SystemExit("strong_by_eye: the model has no per-query search confidence (imgtxt calibrate-search)")

    def level(q, score):
        return calibration.level(calibration.confidence(bench.above([q], [score])[0]))

    # the benchmark's rows and columns, in fitting.build's order
    split = load_split("flickr8k", args.data_dir, "val")
    extra = fitting.read_queries(queries)
    texts = list(split.captions) + [p for p, _ in fitting.caption_phrases(split.captions)] + [q for q, _, _ in extra]
    own = {p.name for p in split.image_paths}
    gallery = list(split.image_paths) + [photos / n for n in sorted({n for _, f, _ in extra for n in f} - own)]
    total, strong, wrong = strong_wrong(bench, level, args.kind)
    print(f"{args.kind}: {total} queries, {strong} strong top results, {strong - len(wrong)} of them right by the "
          f"benchmark's labels ({100 * (strong - len(wrong)) / max(strong, 1):.1f}%)")
    pick = sorted(np.random.default_rng(args.seed).choice(len(wrong), min(args.sample, len(wrong)), replace=False))
    chosen = [wrong[i] for i in pick]
    for n, (q, top) in enumerate(chosen):
        print(f"{n:>3}  {gallery[top].name:<28} {texts[q]}")
    if args.sheets:
        for sheet in draw_sheets([gallery[top] for _, top in chosen], args.sheets):
            print(f"wrote {sheet}")


if __name__ == "__main__":
    main()
