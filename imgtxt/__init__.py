"""imgtxt: search photos by sentence and caption photos with a Full-Network-Embedding joint space.

    import imgtxt
    lib = imgtxt.Library()            # the index in $IMGTXT_INDEX_DIR or ~/.local/share/imgtxt
    lib.search("a dog on a beach")    # -> [PhotoMatch(rank, score, path, id, copies), ...]
"""
__version__ = "0.1.0"

from imgtxt.errors import ImgtxtError, Interrupted  # noqa: E402

_MODULE_OF = {"Library": ".library.photo_library", **{name: ".library.results" for name in
              ("PhotoMatch", "CaptionMatch", "Folder", "Status", "PhotoRecord")}}


def __getattr__(name: str):
    # The library (and numpy with it) loads on first use, so `imgtxt --version` stays instant.
    if name in _MODULE_OF:
        import importlib

        return getattr(importlib.import_module(_MODULE_OF[name], __name__), name)
    raise AttributeError(f"module 'imgtxt' has no attribute {name!r}")


__all__ = ["ImgtxtError", "Interrupted", *_MODULE_OF]
