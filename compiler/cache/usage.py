"""What a process used from the kernel cache: the manifest a deployment exports exactly.

With ``TILEJIT_CACHE_RECORD=FILE`` set, the first use in the process of each kernel entry (a hit
or a build; the compiled launch path's module included) and of each autotune decision file is
appended to FILE, one line each::

    entry <key> <target> <kernel>
    decisions <file name>

Run the workload once with it, then ``python -m compiler.cache export ARCHIVE --keys FILE`` ships
those and nothing else. Lines are appended whole (one ``write`` each), so processes may share the
file; a key listed twice is exported once. ``used()`` is the same set for this process.
"""
from __future__ import annotations

import os
import threading

__all__ = ["ENV", "note_entry", "note_decisions", "used", "read_manifest"]

ENV = "TILEJIT_CACHE_RECORD"
_seen: set[str] = set()
_lock = threading.Lock()


_written: set[tuple[str, str]] = set()   # (record file, item) already appended


def _append(item: str, line: str) -> None:
    path = os.environ.get(ENV, "")
    with _lock:
        _seen.add(item)
        if not path or (path, item) in _written:
            return
        _written.add((path, item))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def note_entry(key: str, meta: dict) -> None:
    """A kernel entry was used (found or built)."""
    kernel = str(meta.get("kernel") or "-").replace(" ", "_")
    _append(key, f"entry {key} {meta.get('target') or '-'} {kernel}")


def note_decisions(file_name: str) -> None:
    """An autotune decision file was read by a library op."""
    _append(f"decisions/{file_name}", f"decisions {file_name}")


def used() -> set[str]:
    """Keys of the entries (and `decisions/<name>` of the decision files) this process used."""
    with _lock:
        return set(_seen)


def read_manifest(path) -> tuple[set[str], set[str]]:
    """(entry keys, decision file names) a TILEJIT_CACHE_RECORD file lists; a line that is only a
    key is an entry key too (a list of keys written by hand)."""
    keys, decisions = set(), set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0] == "entry" and len(parts) >= 2:
                keys.add(parts[1])
            elif parts[0] == "decisions" and len(parts) >= 2:
                decisions.add(parts[1])
            elif len(parts) == 1:
                keys.add(parts[0])
    return keys, decisions
