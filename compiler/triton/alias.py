"""Serving the front door as `triton` to unmodified code.

`install_alias()` replaces `builtins.__import__` with a thin wrapper: an absolute import of
`triton` or `triton.<sub>` from user code returns this package (`compiler.triton.<sub>`), while
the same import from the real Triton's own modules, from torch, and from tilejit itself (the gpu
target and the Triton source it generates compile through the real Triton) goes to the real one.
`sys.modules` is left alone, so the real Triton stays intact for those importers;
`importlib.import_module("triton")` (which does not go through `__import__`) also gets the real
one, or fails where none is installed. A submodule the front door lacks is a ModuleNotFoundError,
as it would be with a Triton build that lacks it.

Install the alias before the library's modules are imported: a module that already ran
`import triton` keeps the object it got.
"""
from __future__ import annotations

import builtins
import contextlib
import importlib
import threading

# importers that get the real Triton: Triton itself, torch (inductor), tilejit's own packages and
# the gpu target's generated kernel modules
REAL_FOR = ("triton", "torch", "compiler", "targets", "kernels", "runtime", "tilejit_gpu_kernels")

_lock = threading.Lock()
_state = {"orig": None}


def _wants_real(globals_) -> bool:
    name = (globals_ or {}).get("__name__") or ""
    return name.split(".", 1)[0] in REAL_FOR


def _ours(name: str):
    sub = "compiler.triton" + name[len("triton"):]
    try:
        return importlib.import_module(sub)
    except ModuleNotFoundError as e:
        if e.name and (e.name == sub or sub.startswith(e.name + ".") or e.name.startswith(sub)):
            raise ModuleNotFoundError(f"No module named '{name}' (tilejit's Triton front door has no such "
                                      "module)", name=name) from None
        raise


def _import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - __import__'s names
    if level == 0 and name.startswith("triton") and (len(name) == 6 or name[6] == ".") \
            and not _wants_real(globals):
        mod = _ours(name)
        if not fromlist:
            return _ours("triton")
        for item in fromlist:
            if item != "*" and not hasattr(mod, item):
                try:
                    _ours(f"{name}.{item}")
                except ModuleNotFoundError:
                    pass   # `from triton.x import missing` then raises ImportError, as usual
        return mod
    return _state["orig"](name, globals, locals, fromlist, level)


def install_alias() -> None:
    """Serve `compiler.triton` as `triton` to code imported from now on (idempotent)."""
    with _lock:
        if _state["orig"] is None:
            _state["orig"] = builtins.__import__
            builtins.__import__ = _import


def uninstall_alias() -> None:
    """Undo install_alias (modules already imported keep what they got)."""
    with _lock:
        if _state["orig"] is not None:
            if builtins.__import__ is _import:
                builtins.__import__ = _state["orig"]
            _state["orig"] = None


def alias_installed() -> bool:
    return _state["orig"] is not None


@contextlib.contextmanager
def alias():
    """`with alias(): import library` (uninstalled afterwards unless it was installed before)."""
    was = alias_installed()
    install_alias()
    try:
        yield
    finally:
        if not was:
            uninstall_alias()
