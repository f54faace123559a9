"""How a tile of pointers (or integers) changes along one axis, read off the IR.

The kunlun lowering copies a tile between GM and LM with one DMA per contiguous row segment when
the pointer advances by exactly one element along the row axis. `step(v, axis)` returns that
advance as a compile-time integer, or None when it is not a known constant (a gather, a stride
that is a run-time argument, anything non-affine).
"""
from __future__ import annotations

from compiler.ir import Value

_UNIFORM_SOURCES = ("const", "program_id", "num_programs")


def _const_value(v: Value):
    """The compile-time value of a scalar or splatted constant, else None."""
    op = v.owner
    while op is not None and op.name == "broadcast":
        op = op.operands[0].owner
    if op is not None and op.name == "const":
        return op.attrs["value"]
    return None


def step(v: Value, axis: int, _memo: dict | None = None) -> int | None:
    """d v / d index[axis] as a constant, or None when unknown."""
    if v.type.is_scalar:
        return 0
    memo = {} if _memo is None else _memo
    key = (id(v), axis)
    if key not in memo:
        memo[key] = None   # cycles cannot occur in SSA, but a guard is cheap
        memo[key] = _step(v, axis, memo)
    return memo[key]


def _step(v: Value, axis: int, memo: dict) -> int | None:
    op = v.owner
    if op is None:
        return None
    name = op.name
    if v.shape[axis] == 1 or name in _UNIFORM_SOURCES:
        return 0
    if name == "arange":
        return 1
    if name == "broadcast":
        src = op.operands[0]
        if src.type.is_scalar or src.shape[axis] == 1:
            return 0
        return step(src, axis, memo)
    if name == "expand_dims":
        ax = op.attrs["axis"]
        return 0 if axis == ax else step(op.operands[0], axis if axis < ax else axis - 1, memo)
    if name == "trans":
        return step(op.operands[0], op.attrs["perm"][axis], memo)
    steps = [step(o, axis, memo) for o in op.operands]
    if name in ("add", "sub", "neg") and None not in steps:
        if name == "neg":
            return -steps[0]
        return steps[0] + steps[1] if name == "add" else steps[0] - steps[1]
    if name == "mul" and None not in steps:
        a, b = op.operands
        if steps[0] == 0 and steps[1] == 0:
            return 0
        c = _const_value(a) if steps[0] == 0 else _const_value(b)
        if steps[0] == 0 or steps[1] == 0:
            return None if c is None else int(c) * (steps[1] if steps[0] == 0 else steps[0])
        return None
    if name == "cast" and v.dtype.is_int() and op.operands[0].dtype.is_int():
        src = op.operands[0].dtype
        # widening keeps the value; int64 -> int32 is the identity on this target (32-bit integers)
        return steps[0] if v.dtype.bits >= src.bits or src.bits == 64 else None
    if all(s == 0 for s in steps) and steps:
        return 0   # every operand is uniform along the axis, so the result is too
    return None
