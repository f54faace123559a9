"""Policies that decide whether the cache may compile or load: strict (no-compile) mode, and the
refusal to load executable artifacts from a directory other users can write to."""
from __future__ import annotations

import logging
import os
import pathlib
import stat
import warnings

log = logging.getLogger("compiler.cache")


class CacheError(Exception):
    """The cache cannot do what was asked (e.g. it is read-only and the entry is missing)."""


class CacheMissError(CacheError):
    """TILEJIT_CACHE_STRICT=1 and a kernel is not in the cache (compiler/cache_miss.py words it)."""


_STAMPED = ("TILEJIT_CACHE_DIR", "XDG_CACHE_HOME", "TILEJIT_CACHE_STRICT")
_ENV_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
_K0, _K1, _K2 = (k.encode() for k in _STAMPED)


def settings_stamp() -> tuple:
    """The environment settings that decide which cache, and so which decisions, are visible
    (cache dir, XDG cache home, strict mode), cheaply: memos of decisions are keyed by it. On
    POSIX it reads os.environ's own dict (what os.environ[...] = ... updates) with three lookups."""
    d = _ENV_DATA
    if d.__class__ is dict:
        return d.get(_K0), d.get(_K1), d.get(_K2)
    return tuple(os.environ.get(k) for k in _STAMPED)


def strict_mode() -> bool:
    """True when ``TILEJIT_CACHE_STRICT`` is set to a true value: any cache miss that would compile is an error."""
    return os.environ.get("TILEJIT_CACHE_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


_warned_dirs: set[tuple[str, str]] = set()


def check_dir_safety(*dirs: pathlib.Path) -> None:
    """Refuse (CacheError) to load artifacts - executable code - from a directory other users can
    write to: world-writable without the sticky bit, or owned by another user (not root). A
    group-writable directory is only warned about, loudly and once per directory: umask 002 (user
    private groups) makes every directory group-writable by default, and a shared team cache is
    deliberately so. ``TILEJIT_CACHE_ALLOW_UNSAFE=1`` turns the refusal into a warning as well.
    Missing directories are skipped (nothing to load from them)."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for d in dirs:
        try:
            st = os.stat(d)
        except OSError:
            continue
        mode = st.st_mode
        problem = None
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            problem = "is world-writable (no sticky bit)"
        elif uid is not None and st.st_uid not in (uid, 0):
            problem = f"is owned by another user (uid {st.st_uid})"
        if problem is not None:
            risk = f"kernel cache directory {d} {problem}: other users could plant executable code in it"
            fix = "fix its permissions (chmod go-w, chown) or point TILEJIT_CACHE_DIR elsewhere"
            if os.environ.get("TILEJIT_CACHE_ALLOW_UNSAFE", "") != "1":
                raise CacheError(f"{risk}. Refusing to load artifacts from it; {fix}, or set "
                                 "TILEJIT_CACHE_ALLOW_UNSAFE=1 to load anyway.")
            msg = f"{risk}. Loading artifacts from it anyway, because TILEJIT_CACHE_ALLOW_UNSAFE=1 is set; {fix}."
        elif mode & stat.S_IWGRP:
            msg = (f"kernel cache directory {d} is group-writable: members of its group can change "
                   f"executable kernel code loaded from it (chmod g-w if that is not intended)")
        else:
            continue
        if (str(d), msg) not in _warned_dirs:  # once per directory and problem
            _warned_dirs.add((str(d), msg))
            log.warning("tilejit cache: WARNING: %s", msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
