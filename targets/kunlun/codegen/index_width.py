"""64-bit integers on a 32-bit chip.

Kunlun's device `long` and `void*` are 4 bytes, so the target computes every integer in 32 bits.
Kernels still write `pid.to(tl.int64) * stride` to be safe on 64-bit targets; on this target
that arithmetic is exact as long as the value only feeds addresses: add, sub, mul and neg agree
with 64-bit arithmetic modulo 2**32, a device address *is* a value modulo 2**32, and the launcher
refuses tensors over 2**31-1 bytes, so every in-bounds offset is representable.

Anything else an int64 value reaches (a comparison, a division, a shift, a cast to float, a
reduction, a store) could see the truncation, so it is refused with the op's source line.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Function, Op
from compiler.ir.ops import OPS

_RING_OPS = ("add", "sub", "mul", "neg")   # exact modulo 2**32


def check_int64_feeds_addresses(fn: Function) -> None:
    """Raises CompilationError naming the kernel and the op when an int64 value is used for
    anything but address arithmetic (see the module docstring)."""
    for op in fn.walk():
        if op.name in ("load", "store"):
            for v in op.operands[1:] if op.name == "store" else ():
                if v.dtype is D.int64:
                    raise _refuse(fn, op, "store writes a 64-bit integer")
            for r in op.results:
                if r.dtype is D.int64:
                    raise _refuse(fn, op, "load reads a 64-bit integer")
        if not any(v.dtype is D.int64 for v in op.operands):
            continue
        if op.name in _RING_OPS or OPS[op.name].kind == "view":
            continue   # results are int64 (checked at their own uses) or a pointer
        if op.name == "cast" and op.results[0].dtype.is_int():
            continue   # narrowing keeps the low bits, which 32-bit arithmetic has exactly
        if op.name == "yield":
            continue   # a loop-carried index; its uses inside the loop are checked
        raise _refuse(fn, op, f"'{op.name}' uses a 64-bit integer")


def _refuse(fn: Function, op: Op, what: str) -> CompilationError:
    return CompilationError.at(
        op.loc, f"this {what}: the kunlun target computes integers in 32 bits "
        "(device `long` and `void*` are 4 bytes), which is exact for 64-bit values only when they "
        "feed addresses (+, -, * into a pointer). Keep this arithmetic in int32, or run the kernel on "
        "another target.", kernel=fn.name)
