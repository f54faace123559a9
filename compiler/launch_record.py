"""Recording the kernel launches a piece of host code makes, so that a caller can replay them.

Within `with recording() as launches:`, every `kfn[grid](...)` in this context takes the Python
launch path (compiler/jit.py `KernelFunction.run`) and, after it ran, appends
`(compiled_kernel, grid, args)` to `launches`: the specialisation it ran, the grid as launched
(a callable grid already evaluated) and the whole bound argument tuple, constexprs included, as
`compiled_kernel.launcher(grid, args)` takes it. The library ops' launch plans
(kernels/op_plans.py) are built from it.

`launching_op(name)` / `current_op()`: which library op is launching (kernels/torch_ops.py sets it
around an op's launches), so a kernel built then records its op (`python -m compiler.cache export
--op`) and a kernel missing from a strict cache names the op and the command that pre-builds it.
"""
from __future__ import annotations

import contextlib
import contextvars

_RECORD: contextvars.ContextVar[list | None] = contextvars.ContextVar("tilejit_launch_record", default=None)
_OP: contextvars.ContextVar[str | None] = contextvars.ContextVar("tilejit_library_op", default=None)


@contextlib.contextmanager
def recording():
    """Collects the launches made inside the block (see the module docstring)."""
    launches: list = []
    token = _RECORD.set(launches)
    try:
        yield launches
    finally:
        _RECORD.reset(token)


def active() -> list | None:
    """The list launches are recorded into, or None outside a `recording()` block."""
    return _RECORD.get()


def launching_op(name: str):
    """Marks the launches that follow as library op `name`'s; returns the token `done` takes."""
    return _OP.set(name)


def done(token) -> None:
    _OP.reset(token)


def current_op() -> str | None:
    """The library op whose launches run now (None: a user's own kernel)."""
    return _OP.get()
