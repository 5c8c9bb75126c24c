"""Does int8 storage change retrieval? Val rsum of one trained model stored several ways, and the folder size.

    IMGTXT_CACHE_DIR=... .venv/bin/python bench/quantize_effect.py --data-dir ../shared/data/flickr8k --model RUN/best

Variants: the model as trained-and-saved (fp16 tensors), then int8 with per-row scales for the image projection,
+ the MiniLM word-embedding table, + every MiniLM weight matrix. Features: the model's cached raw val features.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()

    from imgtxt.model.modelfile import TrainedModel
    from imgtxt.research.packaging import resave_model
    from imgtxt.model.text_encoders import tensor_names, text_config_of
    from imgtxt.research.evaluate import evaluate_model

    base = TrainedModel.load(args.model)
    text_names = tensor_names(text_config_of(base.config))
    matrices = [n for n in text_names if len(base.tensors.shape(n)) == 2 and "position" not in n and "token_type" not in n]
    variants = {"fp16 (as saved)": None, "int8 image projection": ("image_projection",),
                "+ int8 word embeddings": ("image_projection", "minilm.embeddings.word_embeddings.weight"),
                "+ int8 every text matrix": ("image_projection", *matrices)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, int8 in variants.items():
            folder = Path(args.model)
            if int8 is not None:
                folder = Path(tmp) / name.replace(" ", "_")
                resave_model(args.model, folder, tuple(n for n in int8 if n in text_names + ["image_projection"]))
            result = evaluate_model(TrainedModel.load(folder), "flickr8k", args.data_dir, "val", quiet=True)
            size = sum(p.stat().st_size for p in folder.iterdir()) / 2 ** 20
            print(f"{name:<28} val rsum {result['rsum']:6.2f}   folder {size:5.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
