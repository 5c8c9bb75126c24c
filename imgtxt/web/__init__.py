"""`imgtxt serve`: a small Starlette app over `imgtxt.library.Library` (app) and its Jinja2 templates.

May import: imgtxt.library, imgtxt.model and the shared modules.
"""
