"""The Python globals (and closure cells) a kernel read while it was compiled.

The frontend folds what a kernel reads from its module - a constant, a helper kernel, a dtype -
into the IR, so the compiled kernel is only right while those names still hold those objects.
The frontend records each as (where, name, value): `where` is the function's globals dict or the
closure cell. The warm path checks them by identity on every launch (a dict lookup each, in C on
the compiled path); when one changed, the launch recompiles with the new value rather than run
the stale kernel (the disk cache is keyed by the IR, so changing a global back is a cache hit).
"""
from __future__ import annotations

import types

_MISSING = object()
# values compared by equality when their identity changed (`X = 2.0` executed again)
_SCALARS = (int, float, complex, bool, str, bytes, type(None))


def record(captured: dict | None, where, name: str, value) -> None:
    """Notes that the kernel being compiled read `value` as `name` from `where` (a dict or a cell)."""
    if captured is None or isinstance(value, types.ModuleType):
        return   # modules (tl, math) are not rebound in practice, and are read on every line
    captured.setdefault((id(where), name), (where, name, value))


def _now(where, name):
    if isinstance(where, types.CellType):
        try:
            return where.cell_contents
        except ValueError:
            return _MISSING
    return where.get(name, _MISSING)


def is_current(captured: tuple) -> bool:
    """Whether every captured name still holds the very object the kernel was compiled with."""
    for where, name, value in captured:
        if _now(where, name) is not value:
            return False
    return True


def still_current(compiled) -> bool:
    """Whether the globals `compiled.captured` lists still hold what it was compiled with: the same
    objects, or a rebound equal scalar, which is noted in `compiled.captured` so the identity checks
    (`is_current`, and its mirror in compiler/fastpath/tjfast.c) pass again."""
    if is_current(compiled.captured):
        return True
    now = refreshed(compiled.captured)
    if now is None:
        return False
    compiled.captured = now
    return True


def refreshed(captured: tuple) -> tuple | None:
    """`captured` with rebound-but-equal scalars (same type, same value) updated to the new objects,
    or None when some name now holds something different (the kernel must be recompiled)."""
    out = []
    for where, name, value in captured:
        now = _now(where, name)
        if now is not value:
            # repr tells -0.0 from 0.0, which compare equal but compile to different constants
            if not (type(now) is type(value) and isinstance(value, _SCALARS) and now == value
                    and repr(now) == repr(value)):
                return None
            value = now
        out.append((where, name, value))
    return tuple(out)
