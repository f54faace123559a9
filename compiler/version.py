"""Version and source hashes that go into cache keys."""
from __future__ import annotations

import hashlib
import os

__version__ = "0.1.0"

_SOURCE_SUFFIXES = (".py", ".j2", ".h", ".hpp")
# compiler/ files that cannot change a kernel's bits: the doctor, the command lines and their
# reports only read what the compiler made, so editing them keeps every cached kernel
COMPILER_FILES_OUTSIDE_THE_KEY = frozenset({
    "doctor.py", "inspect.py", "as_triton.py", "clihelp.py",
    "cache/cli.py", "cache/__main__.py", "autotune/__main__.py", "autotune/summary.py",
})


# (directory, leave_out) -> the hash this process first computed for it: what its cache keys say
_KEYED: dict[tuple[str, frozenset], str] = {}
_COMPILER_HASH = None


def compiler_source_hash() -> str:
    """Hash of the compiler package's own sources, part of every kernel-cache key: a change to the
    compiler invalidates the cache (a change to its doctor or command lines does not:
    COMPILER_FILES_OUTSIDE_THE_KEY)."""
    global _COMPILER_HASH
    if _COMPILER_HASH is None:
        _COMPILER_HASH = package_source_hash(os.path.dirname(__file__), COMPILER_FILES_OUTSIDE_THE_KEY)
    return _COMPILER_HASH


def package_source_hash(directory: str, leave_out: frozenset = frozenset()) -> str:
    """sha256 over the names and contents of a package's source files, in sorted order, but those
    whose path relative to `directory` (with "/") is in `leave_out`: for a cache key, so the first
    hash of each directory is remembered for `changed_sources`."""
    digest = hash_sources(directory, leave_out)
    _KEYED.setdefault((os.path.realpath(directory), leave_out), digest)
    return digest


def changed_sources() -> list[str]:
    """The directories whose sources differ from their first hash in this process. Templates and
    headers are read when a kernel is rendered and compiled, after its key was computed: a kernel
    built once they changed (an edit, or an upgrade in place under a running process) does not
    match its key, and must not be stored under it."""
    return [d for (d, leave_out), digest in list(_KEYED.items()) if hash_sources(d, leave_out) != digest]


def hash_sources(directory: str, leave_out: frozenset = frozenset()) -> str:
    """package_source_hash without remembering it (for a copy of a package, as tests make)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            path = os.path.join(root, f)
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            if f.endswith(_SOURCE_SUFFIXES) and rel not in leave_out:
                h.update(os.path.relpath(path, directory).encode())
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()
