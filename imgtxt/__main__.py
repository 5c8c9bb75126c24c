"""`python -m imgtxt` is the `imgtxt` command."""
from imgtxt.cli.main import app

app(prog_name="imgtxt")
