"""What one `imgtxt index` run did: counts, skip reasons, and the line and JSON object that report them."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Summary:
    added: int = 0
    updated: int = 0
    moved: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)       # path key -> reason (all bad files under the roots)
    new_skips: list[tuple[str, str]] = field(default_factory=list)  # reported during this run
    embedded: int = 0                                              # photos that went through the CNN
    indexed: int = 0                                               # photos searchable after the run
    model_note: str = ""
    kept_offline: dict[str, int] = field(default_factory=dict)     # root -> photos kept although it is missing/empty
    vector_index: str = ""                                         # what the run did to the search files
    device: str = ""                                               # where the CNN ran ("" if nothing was embedded)

    def reason_counts(self) -> Counter:
        return Counter(reason.split(" (")[0] for reason in self.skipped.values())

    def as_dict(self) -> dict:
        return {"added": self.added, "updated": self.updated, "moved": self.moved, "removed": self.removed,
                "unchanged": self.unchanged, "skipped": len(self.skipped), "embedded": self.embedded,
                "indexed": self.indexed, "skipped_reasons": dict(self.reason_counts()),
                "kept_offline": dict(self.kept_offline), "vector_index": self.vector_index}

    def line(self) -> str:
        text = (f"{self.added} added, {self.updated} updated, {self.moved} moved, {self.removed} removed, "
                f"{self.unchanged} unchanged, {len(self.skipped)} skipped")
        if self.skipped:
            text += " (" + ", ".join(f"{n} {r}" for r, n in self.reason_counts().most_common()) + ")"
        return text + f"; {self.indexed} photos searchable"
