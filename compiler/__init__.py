"""tilejit's compiler: the tile language, the frontend, the Tile IR, passes, `@kernel`,
the kernel cache and target selection.

    from compiler import kernel, language as tl
"""
from . import language
from .errors import CompilationError, IRError, KernelArgumentError, KernelBoundsError, TargetError, TilejitError
from .jit import CompiledKernel, KernelFunction, compile_only, kernel, render_only
from .numerics import current_policy, numerics
from .target import available_targets, current_target, get_target, register_target, use_target
from .version import __version__


def cdiv(x: int, y: int) -> int:
    """Ceiling division for grid sizes in plain Python."""
    return -(-x // y)


__all__ = ["language", "kernel", "KernelFunction", "CompiledKernel", "CompilationError", "IRError",
           "KernelArgumentError", "KernelBoundsError", "TargetError", "TilejitError", "numerics", "current_policy",
           "available_targets", "current_target", "get_target", "register_target", "use_target", "cdiv",
           "render_only", "compile_only",
           "__version__"]
