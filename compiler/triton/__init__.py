"""The Triton front door: `from compiler import triton`, then write (or import) kernels as for
Triton. `triton.jit`, `autotune`, `heuristics`, `Config`, `cdiv`, `next_power_of_2`, `language`
(tilejit's tile language with `math` and `extra.libdevice`), `runtime.driver`, `testing`,
`tools.tensor_descriptor`. Kernels compile through tilejit for the current target (cpu, gpu,
kunlun, ...).

To run code written against `import triton` unchanged, serve this package as `triton`:
`compiler.triton.install_alias()`, `TILEJIT_AS_TRITON=1` (read when `compiler` is imported) or
`python -m compiler.as_triton script.py [args]` / `python -m compiler.as_triton -m module [args]`
(alias.py says how the real Triton, which the gpu target uses, stays reachable).
"""
from __future__ import annotations

from . import language, runtime, testing, tools  # noqa: F401
from .alias import alias, alias_installed, install_alias, uninstall_alias  # noqa: F401
from .autotuner import AutotuneNote, Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from .jit import JITFunction, KernelInterface, TensorWrapper, jit, reinterpret  # noqa: F401
from . import compiler, errors  # noqa: F401
from ..errors import (AutotunerError, CompilationError, InterpreterError, OutOfResources,  # noqa: F401
                      PTXASError, TritonError)
from ..source import watch_exec

watch_exec()   # kernels generated as text and exec'd get their source back (compiler/source.py)


def _version() -> str:
    # real libraries compare triton.__version__ (>= 3.0 selects the libdevice import paths); report
    # the installed Triton's 3.x version where there is one
    try:
        from importlib.metadata import version  # noqa: PLC0415
        v = version("triton")
        if v.split(".")[0] == "3":
            return v
    except Exception:  # noqa: BLE001 - no triton distribution installed
        pass
    return "3.4.0"


__version__ = _version()


def cdiv(x: int, y: int) -> int:
    """Ceiling division (host side)."""
    return -(-x // y)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def must_use_result(x, s=True):
    return x


__all__ = ["jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language", "runtime", "testing",
           "tools", "JITFunction", "TensorWrapper", "reinterpret", "KernelInterface", "Autotuner", "Heuristics",
           "AutotuneNote", "OutOfResources", "CompilationError", "TritonError", "InterpreterError", "PTXASError",
           "AutotunerError", "compiler", "errors", "install_alias", "uninstall_alias", "alias", "alias_installed",
           "__version__"]
