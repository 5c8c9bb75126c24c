"""The `imgtxt` command: a thin click layer over the library (main), the research commands loaded only when
called (research), and how results are printed (output, preview).

May import every other layer; nothing imports it.
"""
