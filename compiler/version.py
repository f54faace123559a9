"""Version and source hashes that go into cache keys."""
from __future__ import annotations

import hashlib
import os

__version__ = "0.1.0"

_SOURCE_SUFFIXES = (".py", ".j2", ".h", ".hpp")


def package_source_hash(directory: str) -> str:
    """sha256 over the names and contents of a package's source files, in sorted order."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(_SOURCE_SUFFIXES):
                path = os.path.join(root, f)
                h.update(os.path.relpath(path, directory).encode())
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()
