"""Error types users see. Every user-facing error names the kernel and says what to do."""
from __future__ import annotations


class TilejitError(Exception):
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

    def _format(self) -> str:
        where = ""
        if self.filename is not None:
            where = f"{self.filename}:{self.lineno}:{(self.col or 0) + 1}: "
        head = f"{where}in kernel '{self.kernel}': {self.message}" if self.kernel else where + self.message
        if self.source_line is None:
            return head
        caret = " " * (4 + (self.col or 0)) + "^"
        return f"{head}\n    {self.source_line.rstrip()}\n{caret}"


class KernelArgumentError(TilejitError, TypeError, ValueError):
    """A launch passed arguments that do not fit the kernel's signature or the target."""


class TargetError(TilejitError):
    """A target is unknown, unavailable here, or its toolchain failed."""


class IRError(TilejitError):
    """The Tile IR failed verification: a compiler bug, reported with the offending op."""
