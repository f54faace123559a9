"""tilejit's compiler: the tile language, the frontend, the Tile IR, passes, `@kernel`,
the kernel cache and target selection.

    from compiler import kernel, language as tl
"""
import os

from . import language
from .errors import (CompilationError, DeviceAssertionError, InternalError, IRError, KernelArgumentError,
                     KernelBoundsError, TargetError, TilejitError)
from .jit import CompiledKernel, KernelFunction, compile_only, kernel, render_only
from .numerics import current_policy, numerics
from .source import keep_source
from .target import available_targets, current_target, get_target, register_target, use_target
from .version import __version__

if os.environ.get("TILEJIT_AS_TRITON", "") not in ("", "0"):
    from .triton import install_alias as _install_alias   # serve compiler.triton as `triton`
    _install_alias()
__tilejit__ = True   # tells tilejit's packages from others of the same name (compiler/names.py)


def cdiv(x: int, y: int) -> int:
    """Ceiling division for grid sizes in plain Python."""
    return -(-x // y)


__all__ = ["language", "kernel", "KernelFunction", "CompiledKernel", "CompilationError", "DeviceAssertionError",
           "InternalError", "IRError",
           "KernelArgumentError", "KernelBoundsError", "TargetError", "TilejitError", "numerics", "current_policy",
           "available_targets", "current_target", "get_target", "register_target", "use_target", "cdiv",
           "render_only", "compile_only", "keep_source",
           "__version__"]
