"""Error types users see. Every user-facing error names the kernel and says what to do.

Errors about a kernel's code have one format, whichever stage finds the problem (frontend,
verifier, a target's renderer or planner): `file:line:col: in kernel 'name': message`, then the
source line with a caret under the column. Stages that hold an IR value or op build it with
`CompilationError.at(loc, message)`, which reads the source line itself.
"""
from __future__ import annotations

import linecache


class TritonError(Exception):
    """Triton's base of all its errors, served as `triton.TritonError` by the front door. Every
    tilejit error derives from it, so code written for Triton that catches it catches them."""


class TilejitError(TritonError):
    """Base of all tilejit errors."""


class CompilationError(TilejitError):
    """A kernel body uses something outside the tile language, or uses it wrongly.

    The message carries the user's file, line and source line, with a caret under the column.
    """

    def __init__(self, message: str, *, kernel: str | None = None, filename: str | None = None,
                 lineno: int | None = None, col: int | None = None, source_line: str | None = None):
        self.message = message
        self.kernel = kernel
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.source_line = source_line
        super().__init__(self._format())

    @classmethod
    def at(cls, loc, message: str, *, kernel: str | None = None, **extra):
        """The error at an IR location (`compiler.ir.Loc`, or None when the value has none): the
        file, line, column and source line come from `loc`, the kernel name from `kernel` or
        `loc.kernel`. `extra` keyword arguments are passed to a subclass's constructor."""
        if loc is None:
            return cls(message, kernel=kernel, **extra)
        line = linecache.getline(loc.filename, loc.lineno) if loc.filename and loc.lineno else ""
        return cls(message, kernel=kernel or loc.kernel or None, filename=loc.filename, lineno=loc.lineno,
                   col=loc.col, source_line=line or None, **extra)

    def _format(self) -> str:
        where = ""
        if self.filename is not None:
            where = f"{self.filename}:{self.lineno}:{(self.col or 0) + 1}: "
        head = f"{where}in kernel '{self.kernel}': {self.message}" if self.kernel else where + self.message
        if self.source_line is None:
            return head
        line = self.source_line.rstrip()
        indent = len(line) - len(line.lstrip())
        caret = " " * (4 + max(self.col or 0, indent) - indent) + "^"
        return f"{head}\n    {line.lstrip()}\n{caret}"


class KernelArgumentError(TilejitError, TypeError, ValueError):
    """A launch passed arguments that do not fit the kernel's signature or the target."""


class KernelBoundsError(TilejitError, IndexError):
    """A bounds-checked launch found an access outside the tensor its pointer came from."""


class TargetError(TilejitError):
    """A target is unknown, unavailable here, or its toolchain failed."""


class ToolchainMissingError(TargetError):
    """A kernel missing from the kernel cache needs a build this machine cannot do (its target's
    toolchain is not installed); compiler/cache_miss.py words it."""


class InternalError(TilejitError):
    """An unexpected exception inside the compiler while it lowered a kernel: a tilejit bug, not a
    mistake in the kernel. Raised from the original exception (its traceback prints above this
    one), which is also written to `trace_file` (compiler/faults.py)."""

    def __init__(self, message: str, *, kernel: str | None = None, trace_file: str | None = None):
        self.kernel = kernel
        self.trace_file = trace_file
        super().__init__(message)


class IRError(CompilationError):
    """The Tile IR failed verification: a compiler bug, reported at the offending op's source line."""


class DeviceAssertionError(TilejitError, AssertionError):
    """A tl.device_assert failed while a kernel ran; reported at the assert's source line."""

    @classmethod
    def at(cls, loc, message: str, *, kernel: str | None = None):
        return cls(str(CompilationError.at(loc, message, kernel=kernel)))


class OutOfResources(TilejitError):
    """A kernel needs more of a target's resource than it has (`triton.runtime.errors.OutOfResources`,
    which autotuners catch to drop a config). Raised as `OutOfResources(required, limit, name)`;
    Kunlun's LMBudgetError (no memory plan fits local memory) is one."""

    required = limit = None
    name = "resource"

    def __init__(self, *args, **kwargs):
        if len(args) == 3 and not kwargs:
            self.required, self.limit, self.name = args
            args = (f"out of resource: {self.name}, Required: {self.required}, Hardware limit: {self.limit}. "
                    "Reducing block sizes or `num_stages` may help.",)
        super().__init__(*args, **kwargs)


class InterpreterError(TilejitError):
    """`triton.runtime.errors.InterpreterError`: what Triton's interpreter raises when a kernel
    fails while it runs; the gpu:interpret target raises it for Triton's own."""


class PTXASError(TilejitError):
    """`triton.runtime.errors.PTXASError` (ptxas failed; the gpu target reports it as a TargetError)."""


class AutotunerError(TilejitError):
    """`triton.runtime.errors.AutotunerError`."""
