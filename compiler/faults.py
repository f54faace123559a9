"""Faults of the compiler itself, told apart from mistakes in a kernel or a launch.

A user error (CompilationError, KernelArgumentError, ...) stays short: it points at the user's
line, and the launch drops the compiler's frames. Any other exception while tilejit lowers a
kernel (frontend, passes, numerics, rendering), and an IR that fails verification, is a tilejit
bug: it becomes an InternalError that says so and names the kernel, raised from the original
exception (whose traceback prints above it), and the traceback is also written to a file the
message names, for a report and for callers that keep only the message (the autotuner's list of
rejected configs).

`TILEJIT_DEBUG` is read here only: set to anything but "" or "0", the compiler's frames stay
behind user errors and an internal error is raised as the original exception.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback

from .errors import InternalError, IRError, TilejitError


def debug_enabled() -> bool:
    """Whether TILEJIT_DEBUG is on: set to anything but "" or "0"."""
    return os.environ.get("TILEJIT_DEBUG", "") not in ("", "0")


@contextlib.contextmanager
def compiler_faults(kernel: str, stage: str):
    """Within the block, an exception that is not a tilejit error (or is an IRError) is raised as
    an InternalError naming `kernel` and `stage`, from the original; with TILEJIT_DEBUG on, the
    original is raised as it is."""
    try:
        yield
    except TilejitError as exc:
        if not isinstance(exc, IRError) or debug_enabled():
            raise
        raise internal_error(exc, kernel, stage) from exc
    except Exception as exc:
        if debug_enabled():
            raise
        raise internal_error(exc, kernel, stage) from exc


def internal_error(exc: BaseException, kernel: str, stage: str) -> InternalError:
    what = f"{type(exc).__name__}: {exc}".splitlines()[0]
    path, why = _write_trace(exc, kernel, stage)
    where = (f"Its traceback is printed above and written to {path}" if path else
             f"Its traceback is printed above (it could not be written to a file: {why})")
    return InternalError(
        f"internal error in tilejit while {stage} kernel '{kernel}' (a bug in tilejit, not in the kernel): "
        f"{what}\n{where}; please report it with that traceback and the kernel. TILEJIT_DEBUG=1 raises "
        "the original exception.", kernel=kernel, trace_file=path)


def _write_trace(exc: BaseException, kernel: str, stage: str) -> tuple[str | None, str]:
    """(the file the traceback was written to, or None and why not)."""
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in kernel)[:60]
    try:
        fd, path = tempfile.mkstemp(prefix=f"tilejit-internal-error-{safe}-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(f"tilejit internal error while {stage} kernel '{kernel}'\n"
                    f"python {sys.version.split()[0]}, {sys.platform}\n\n")
            f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except OSError as e:
        return None, str(e)
    return path, ""
