"""Launchers of the gpu target.

- `InterpretLauncher`: runs the generated Triton source through Triton's interpreter on CPU
  tensors, in this process, without TRITON_INTERPRET. Triton decides at import time whether
  `@triton.jit` makes interpreted functions, so with the variable unset the standard library
  (`tl.sum`, `tl.max`, `tl.sigmoid`, ... are themselves `@triton.jit` functions) refuses to be
  called outside a compiled kernel. While an interpreted launch runs (under a lock), calls to a
  `JITFunction` are routed to the interpreter's own path for device-function calls
  (`_patch_lang` + the rewritten function, exactly what `InterpretedFunction.__call__` does
  under TRITON_INTERPRET=1); the patch is removed when the launch returns.
- `DeviceLauncher`: a CUDA/ROCm device: Triton's own `JITFunction` launch on torch's current
  stream (Triton specialises pointer alignment itself and keeps its own binary cache).
- `CompileOnlyLauncher`: an arch named for a machine without that device: raises.
"""
from __future__ import annotations

import contextlib
import threading

from compiler.errors import KernelArgumentError, TargetError

_interp_lock = threading.RLock()


@contextlib.contextmanager
def interpreting():
    """Routes `JITFunction.__call__` (device-function calls such as tl.sum) to Triton's
    interpreter for the duration of the block."""
    from triton.runtime import interpreter as I  # noqa: PLC0415, N812
    from triton.runtime.jit import JITFunction  # noqa: PLC0415

    def _call(self, *args, **kwargs):
        scope = I._patch_lang(self.fn)
        try:
            return I.InterpretedFunction(self.fn).rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    with _interp_lock:
        original = JITFunction.__dict__["__call__"]
        JITFunction.__call__ = _call
        try:
            yield
        finally:
            JITFunction.__call__ = original


def _grid3(name, grid):
    if callable(grid):
        raise KernelArgumentError(f"kernel '{name}': the grid reached the launcher unresolved")
    grid = tuple(int(g) for g in grid)
    if not 1 <= len(grid) <= 3:
        raise KernelArgumentError(f"kernel '{name}': grid must have 1 to 3 dimensions, got {grid!r}")
    if any(g < 0 for g in grid):
        raise KernelArgumentError(f"kernel '{name}': grid sizes must be >= 0, got {grid!r}")
    return grid


class InterpretLauncher:
    def __init__(self, jit_fn, name: str, arg_indices: list[int]):
        from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415
        self.fn = InterpretedFunction(jit_fn.fn)
        self.name = name
        self.arg_indices = list(arg_indices)

    def __call__(self, grid, args) -> None:
        grid = _grid3(self.name, grid)
        if 0 in grid:
            return
        runtime = [args[i] for i in self.arg_indices]
        with interpreting():
            self.fn[grid](*runtime)


class DeviceLauncher:
    def __init__(self, jit_fn, name: str, arg_indices: list[int], options: dict):
        self.fn = jit_fn
        self.name = name
        self.arg_indices = list(arg_indices)
        self.options = dict(options)

    def __call__(self, grid, args) -> None:
        grid = _grid3(self.name, grid)
        if 0 in grid:
            return
        self.fn[grid](*[args[i] for i in self.arg_indices], **self.options)


class CompileOnlyLauncher:
    def __init__(self, target_name: str, name: str, entry_dir: str, artifacts):
        self.msg = (f"kernel '{name}' was compiled for target '{target_name}', which is compile-only: there is no "
                    f"such device on this machine. Its artifacts ({', '.join(artifacts)}) are in {entry_dir}. "
                    "Run on a machine with the GPU using target 'gpu', or use 'gpu:interpret' to run the same "
                    "Triton source through Triton's interpreter on CPU tensors.")

    def __call__(self, grid, args) -> None:
        raise TargetError(self.msg)
