"""Runtime error types. Every device failure becomes a `DeviceError` that keeps the target's own
code and message (an errno on cpu, a CUresult/XPU error code elsewhere), so that one `except`
catches all targets and the original diagnosis is not lost in translation."""
from __future__ import annotations

from compiler.errors import TilejitError


class DeviceError(TilejitError, RuntimeError):
    """A device call failed. `target`, `op` (the call: "malloc", "memcpy", ...), `code` and
    `message` (the target's own, e.g. 12 / "Cannot allocate memory"), `detail` (what tilejit
    adds: sizes, the device index, what to do)."""

    def __init__(self, target: str, code, message: str, *, op: str | None = None, detail: str = ""):
        self.target, self.code, self.message, self.op, self.detail = target, code, message, op, detail
        where = f"{target} device error" + (f" in {op}" if op else "")
        text = f"{where}: [{code}] {message}"
        super().__init__(text + (f": {detail}" if detail else ""))


class OutOfMemoryError(DeviceError, MemoryError):
    """An allocation did not fit. `request` is the size asked for in bytes and `stats` the
    allocator's statistics at the time (a `runtime.memory.PoolStats` for the pool), both also
    printed in the message."""

    def __init__(self, target: str, code, message: str, *, op: str | None = "alloc", detail: str = "",
                 request: int | None = None, stats=None):
        self.request, self.stats = request, stats
        super().__init__(target, code, message, op=op, detail=detail)


class InvalidFreeError(DeviceError, ValueError):
    """A free of something that is not currently allocated: a double free, or a block of
    another pool/device."""


class KVCachePlanError(TilejitError, ValueError):
    """A KV-cache plan does not fit in the memory given; the message shows the arithmetic."""
