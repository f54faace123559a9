"""When the kernel cache cannot take a new entry (a full disk, a quota, a read-only directory), a
launch still runs: the kernel is built into a directory private to this process instead (the
system's temporary directory, or /dev/shm, which is memory, whichever has more room), removed
when the process exits, and one warning per cache directory says which cache, why, and where
kernels go meanwhile. The cache itself is left as it was: a failed build's directory is removed
(KernelCache._build) and an entry only ever appears by the rename of a complete one, so nothing
half-written is left in it or loaded from it. A cache found unwritable stays so for the process:
later builds go straight to the private directory (lookups still read the cache).
"""
from __future__ import annotations

import atexit
import errno
import os
import shutil
import tempfile
import threading

from .safety import CacheError, log

_FULL = (errno.ENOSPC, errno.EDQUOT)


class CacheUnwritable(CacheError):
    """The cache directory cannot take a new entry; `reason` says why, in the system's words."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def out_of_space(exc: BaseException) -> str | None:
    """Why `exc` says a disk or quota is full (the OSError itself, or the line of a tool's output
    that says so, e.g. the C++ compiler's), or None."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return str(exc)
    words = [os.strerror(code) for code in _FULL]
    for line in str(exc).splitlines():
        if any(w in line for w in words):
            return line.strip()
    return None


_lock = threading.Lock()
_private: dict = {}      # "cache": the process's private KernelCache, once made
_warned: set = set()     # cache roots already warned about


def _roomiest() -> str:
    """The candidate directory with the most free bytes (the temporary directory first on a tie)."""
    best, room = tempfile.gettempdir(), -1
    for d in (tempfile.gettempdir(), "/dev/shm"):
        try:
            st = os.statvfs(d)
        except OSError:
            continue
        if os.access(d, os.W_OK) and st.f_bavail * st.f_frsize > room:
            best, room = d, st.f_bavail * st.f_frsize
    return best


def private_cache(cache_cls):
    """This process's private cache (a `cache_cls` over a new directory, removed at exit)."""
    with _lock:
        c = _private.get("cache")
        if c is None:
            root = tempfile.mkdtemp(prefix="tilejit-private-", dir=_roomiest())
            atexit.register(shutil.rmtree, root, True)
            c = _private["cache"] = cache_cls(root, fallback=False)
        return c


def warn_once(root, reason: str, private_root) -> None:
    with _lock:
        if str(root) in _warned:
            return
        _warned.add(str(root))
    log.warning("tilejit cache: cannot write to the kernel cache %s (%s); this process compiles its kernels into "
                "%s instead, removed when it exits (the next process compiles them again). Free space there, or "
                "point TILEJIT_CACHE_DIR at a writable directory.", root, reason, private_root)
