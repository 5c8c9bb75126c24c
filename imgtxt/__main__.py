"""`python -m imgtxt` is the `imgtxt` command."""
from .cli import app

app(prog_name="imgtxt")
