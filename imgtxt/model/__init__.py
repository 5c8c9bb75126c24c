"""The model layer: what a trained imgtxt model is and how it turns photos and sentences into vectors.

Owns the versioned model folder (modelfile: model.json + safetensors, no pickle; tensor_file: lazy read-only
views), the Full-Network Embedding (fne), image decoding (images), the CNN backbones and their torch extractor
(backbones, cnn_torch), the exported CNN graph and its torch-free runtimes (cnn_export, cnn_runtime), and the
text encoders' numpy runtimes (text_encoders, vocab).

May import: numpy, its own modules, and the shared modules imgtxt.errors / imgtxt.paths / imgtxt.safe_text.
Never imports imgtxt.library, imgtxt.research, imgtxt.web or imgtxt.cli. torch is imported only inside the
functions that need it (export, the torch fallback), so a search never loads it.
"""
