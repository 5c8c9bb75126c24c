"""A tiny but real imgtxt model for the library's tests and benches, independent of the shipped weights.

Real EfficientNet-Lite0 FNE feature settings (so `ImageEmbedder` runs the real CNN), random joint weights
(embed_dim 64, word_dim 32), FNE statistics mean 0 / std 1, a small vocabulary and caption bank.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from imgtxt.model.fne import HIGH_CUT, LOW_CUT, FeatureStats
from imgtxt.model.modelfile import save_model
from imgtxt.model.vocab import Vocabulary

WORDS = ("a the of on in with and . , dog dogs cat man woman child boy girl people running runs sitting "
         "standing beach water grass snow street red blue black white brown ball cup coffee table rocket "
         "sky night stars space astronaut camera photo picture").split()
CAPTIONS = [
    "a dog running on the beach .", "a cat sitting on a table .", "a cup of coffee on a table .",
    "a rocket in the sky .", "a man with a camera .", "stars in the night sky .",
    "an astronaut in a white suit .", "a child playing in the snow .", "two dogs running in the grass .",
    "a woman standing on a street .", "a red ball in the water .", "a black and white photo of a man .",
]
EMBED_DIM, WORD_DIM = 64, 32


def backbone_facts() -> dict:
    """backbone_id, raw_dim and baseline_slice of the real EfficientNet-Lite0 'all' layer set (loads torch)."""
    from imgtxt.research.pipeline import FeatureSettings, open_extractor

    extractor = open_extractor(FeatureSettings(layer_set="all", crops=1))
    facts = {"backbone_id": extractor.backbone.id, "raw_dim": extractor.dim,
             "baseline_slice": list(extractor.baseline_slice)}
    extractor.close()
    return facts


def build_tiny_model(folder: Path, facts: dict, seed: int = 0, name: str = "tiny", embed_dim: int = EMBED_DIM) -> Path:
    rng = np.random.default_rng(seed)
    vocab = Vocabulary(WORDS)
    raw_dim, h = facts["raw_dim"], embed_dim
    weights = {
        "word_embedding": rng.normal(0, 0.5, (len(vocab), WORD_DIM)),
        "gru.weight_ih": rng.normal(0, 0.3, (3 * h, WORD_DIM)),
        "gru.weight_hh": rng.normal(0, 0.3, (3 * h, h)),
        "gru.bias_ih": rng.normal(0, 0.1, 3 * h),
        "gru.bias_hh": rng.normal(0, 0.1, 3 * h),
        "image_projection": rng.normal(0, 1 / np.sqrt(raw_dim), (h, raw_dim)),
    }
    config = {
        "name": name,
        "joint": {"vocab_size": len(vocab), "image_dim": raw_dim, "word_dim": WORD_DIM, "embed_dim": h,
                  "similarity": "cosine", "use_abs": False, "image_dropout": 0.0},
        "features": {"kind": "fne", "backbone": "efficientnet_lite0", "backbone_id": facts["backbone_id"],
                     "layer_set": "all", "crops": 1, "precision": "auto", "raw_dim": raw_dim,
                     "baseline_slice": facts["baseline_slice"], "low_cut": LOW_CUT, "high_cut": HIGH_CUT},
    }
    stats = FeatureStats(np.zeros(raw_dim, np.float32), np.ones(raw_dim, np.float32))
    save_model(folder, weights, vocab, config, stats, CAPTIONS)
    return Path(folder)
