"""imgtxt: search photos by sentence and caption photos with a Full-Network-Embedding joint space."""
__version__ = "0.1.0"
