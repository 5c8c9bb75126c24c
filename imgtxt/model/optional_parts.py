"""A model's optional parts (the stored caption vectors, the caption hubness, the caption prior, the per-query
search confidence) load, or are left out with one line saying why and what is used instead: a damaged optional
file never stops a model from loading."""
from __future__ import annotations

from collections.abc import Callable


def refusal(notices: list[str] | None, where: object, instead: str) -> Callable[[str], None]:
    """`refuse(reason)` for a loader: records "where: reason; instead" in `notices` (when given) and returns None,
    so a loader can `return refuse(reason)`."""
    def refuse(reason: str) -> None:
        if notices is not None:
            notices.append(f"{where}: {reason}; {instead}")

    return refuse
