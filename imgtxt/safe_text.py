"""Text from the outside world (file names, queries) made safe to print on a terminal or in a TSV line."""
from __future__ import annotations

import re

# C0 controls, DEL and C1 controls: an ESC in a file name must not drive the terminal, a newline or tab must
# not split a TSV record. JSON output escapes them itself.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def printable(text: str) -> str:
    """`text` with control characters written as escapes (\\n, \\t, \\x1b), safe for a terminal or a TSV line."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"), text)
