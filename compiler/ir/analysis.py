"""Target-neutral analyses of IR values.

- `const_value(v)`: the compile-time value of a constant (a scalar or a splat), else None.
- `index_step(v, axis)`: how a tile of pointers (or integers) advances along one axis, as a
  compile-time integer, or None when it is not a known constant (a gather, a stride that is a
  run-time argument, anything non-affine). A target that moves tiles in contiguous runs (the
  kunlun target's DMA of row segments) asks whether it is 1.
"""
from __future__ import annotations

from .core import Value
from .ops import ADD, ARANGE, BROADCAST, CAST, CONST, EXPAND_DIMS, MUL, NEG, OPS, SUB, TRANS


def const_value(v: Value, through_broadcast: bool = False):
    """The compile-time value of `v` when it is a constant (a scalar, or a tile filled with one
    value), else None; with `through_broadcast`, also of a broadcast of a constant."""
    op = v.owner
    while through_broadcast and op is not None and op.name == BROADCAST:
        op = op.operands[0].owner
    if op is not None and op.name == CONST:
        return op.attrs["value"]
    return None


def index_step(v: Value, axis: int, narrow_int64: bool = False, _memo: dict | None = None) -> int | None:
    """d v / d index[axis] as a constant, or None when unknown. `narrow_int64`: an int64 -> int32
    cast keeps the step (true on a target that has proven its int64 indices fit 32 bits)."""
    if v.type.is_scalar:
        return 0
    memo = {"narrow_int64": narrow_int64} if _memo is None else _memo
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
    if v.shape[axis] == 1 or OPS[name].has("uniform"):
        return 0
    if name == ARANGE:
        return 1
    if name == BROADCAST:
        src = op.operands[0]
        if src.type.is_scalar or src.shape[axis] == 1:
            return 0
        return index_step(src, axis, _memo=memo)
    if name == EXPAND_DIMS:
        ax = op.attrs["axis"]
        return 0 if axis == ax else index_step(op.operands[0], axis if axis < ax else axis - 1, _memo=memo)
    if name == TRANS:
        return index_step(op.operands[0], op.attrs["perm"][axis], _memo=memo)
    steps = [index_step(o, axis, _memo=memo) for o in op.operands]
    if name in (ADD, SUB, NEG) and None not in steps:
        if name == NEG:
            return -steps[0]
        return steps[0] + steps[1] if name == ADD else steps[0] - steps[1]
    if name == MUL and None not in steps:
        a, b = op.operands
        if steps[0] == 0 and steps[1] == 0:
            return 0
        c = const_value(a, True) if steps[0] == 0 else const_value(b, True)
        if steps[0] == 0 or steps[1] == 0:
            return None if c is None else int(c) * (steps[1] if steps[0] == 0 else steps[0])
        return None
    if name == CAST and v.dtype.is_int() and op.operands[0].dtype.is_int():
        src = op.operands[0].dtype
        # widening keeps the value; narrowing keeps it only where the caller knows the values fit
        return steps[0] if v.dtype.bits >= src.bits or (src.bits == 64 and memo["narrow_int64"]) else None
    if all(s == 0 for s in steps) and steps:
        return 0   # every operand is uniform along the axis, so the result is too
    return None
