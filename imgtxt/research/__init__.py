"""The research layer: datasets, training and evaluation of joint models, and the seed systems.

Owns the dataset loaders (Karpathy splits), cached dataset features, the training loop and its losses and
presets (the 2019 FNE paper's SH/MH/SOE/MOE and curricula), the torch modules of the text encoders (text_modules),
Recall@K / Med r and the thesis's metrics, and AMECON. Everything here may import torch.

May import: imgtxt.model and the shared modules. Never imported by imgtxt.model or imgtxt.library.
"""
