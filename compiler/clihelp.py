"""What every command line of the project prints as its `--help` description: the first paragraph
of the module's docstring, on one line, so a sentence that wraps in the source is never cut."""
from __future__ import annotations


def description(doc: str | None) -> str:
    """The first paragraph of `doc` (up to its first blank line), its lines joined by spaces."""
    lines = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines)
