"""Recording the kernel launches a piece of host code makes, so that a caller can replay them.

Within `with recording() as launches:`, every `kfn[grid](...)` in this context takes the Python
launch path (compiler/jit.py `KernelFunction.run`) and, after it ran, appends
`(compiled_kernel, grid, args)` to `launches`: the specialisation it ran, the grid as launched
(a callable grid already evaluated) and the whole bound argument tuple, constexprs included, as
`compiled_kernel.launcher(grid, args)` takes it. The library ops' launch plans
(kernels/op_plans.py) are built from it.
"""
from __future__ import annotations

import contextlib
import contextvars

_RECORD: contextvars.ContextVar[list | None] = contextvars.ContextVar("tilejit_launch_record", default=None)


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
