"""What every command line of the project shares: its `--help` description (the first paragraph of
the module's docstring, on one line, so a sentence that wraps in the source is never cut), and
progress that reaches a log as it happens (`line_buffered`, `step`)."""
from __future__ import annotations

import contextlib
import sys
import time


def description(doc: str | None) -> str:
    """The first paragraph of `doc` (up to its first blank line), its lines joined by spaces."""
    lines = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines)


def line_buffered() -> None:
    """Every printed line reaches a log file as it is printed: stdout to a file or a pipe is
    block-buffered otherwise, and a long command would look silent until it ends."""
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):   # not a text stream of the io module (a test's capture)
        pass


@contextlib.contextmanager
def step(what: str, out=None):
    """`what ...` before a long step and `what: done in N s` after it, flushed (`out`: stdout)."""
    out = out or sys.stdout
    print(f"{what} ...", file=out, flush=True)
    t0 = time.perf_counter()
    yield
    print(f"{what}: done in {time.perf_counter() - t0:.1f} s", file=out, flush=True)
