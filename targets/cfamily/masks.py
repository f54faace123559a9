"""Closed-form checks that a tile mask is all true, for the unmasked fast path of loads and stores.

Most masks compare an index that is affine in the tile's indices against a bound
(`start + tl.arange(0, BLOCK) < N`, `rows[:, None] < M`). Over the tile's box such an index takes
its extremes at two corners, so whether the comparison holds everywhere follows from the value at
index 0 and two constants, instead of a pass over every element (a third of a layer_norm chunk's
time on cpu). The check is exact only when no element of the index wraps around its integer type;
the generated code tests that too (`tj_affine_cmp` in each target's header returns -1 then) and
falls back to the element-by-element check.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import AND, ARANGE, BROADCAST, CAST, CONST, EQ, EXPAND_DIMS, GE, GT, LE, LT, NE, OPS, TRANS

# the comparison's spelling for tj_affine_cmp(..., op): a OP b at every index
CMP_CODES = {LT: 0, LE: 1, GT: 2, GE: 3, EQ: 4, NE: 5}


def _steps(v: Value) -> list[int] | None:
    steps = [index_step(v, k) for k in range(len(v.shape))]
    return None if None in steps else steps


def _affine(v: Value, held) -> bool:
    """Whether every element of integer tile `v` is v[0] + steps . index modulo 2**bits: built from
    uniform values, aranges, views and ring ops, widened only where the operand is an arange (a cast
    of a value that may have wrapped would not be affine). `held(v)`: v lives in a buffer."""
    if v.type.is_scalar:
        return True
    steps = _steps(v)
    if steps is None or held(v):
        return False
    if not any(steps):
        return True
    op = v.owner
    if op.name == ARANGE:
        return True
    if OPS[op.name].has("axis_view") or OPS[op.name].has("ring"):
        return all(_affine(o, held) for o in op.operands)
    if op.name == CAST and v.dtype.is_int() and op.operands[0].dtype.is_int() \
            and v.dtype.bits >= op.operands[0].dtype.bits:
        src = op.operands[0]
        while src.owner is not None and OPS[src.owner.name].has("axis_view"):
            src = src.owner.operands[0]
        return src.owner is not None and src.owner.name == ARANGE
    return False


def _span(shape, steps) -> tuple[int, int]:
    """(lowest, highest) of steps . index over the box `shape`."""
    lo = sum(min(0, s * (n - 1)) for s, n in zip(steps, shape))
    hi = sum(max(0, s * (n - 1)) for s, n in zip(steps, shape))
    return lo, hi


def mask_terms(mask: Value, held, dtypes) -> list[tuple] | None:
    """The comparisons whose conjunction is `mask`, each ("cmp", a, b, code, constants) with
    constants (aLo, aHi, bLo, bHi, dLo, dHi) over the compared tiles' box, or ("scalar", m) for a
    uniform bool; None when some part of the mask is not of that form. `dtypes`: the integer types
    the target's tj_affine_cmp takes."""
    op = mask.owner
    if mask.type.is_scalar or (op is not None and op.name == CONST):   # a constant tile: its one value
        return [("scalar", mask)]
    if op is None:
        return None
    if OPS[op.name].has("axis_view"):
        return mask_terms(op.operands[0], held, dtypes)
    if op.name == AND and mask.dtype == D.int1:
        a, b = (mask_terms(o, held, dtypes) for o in op.operands)
        return None if a is None or b is None else a + b
    if op.name not in CMP_CODES:
        return None
    a, b = op.operands
    if a.dtype != b.dtype or a.dtype not in dtypes or not (_affine(a, held) and _affine(b, held)):
        return None
    shape = mask.shape
    sa = _steps(a) if not a.type.is_scalar else [0] * len(shape)
    sb = _steps(b) if not b.type.is_scalar else [0] * len(shape)
    consts = (*_span(shape, sa), *_span(shape, sb), *_span(shape, [x - y for x, y in zip(sa, sb)]))
    limit = 2 ** (a.dtype.bits - 1) - 1
    if any(abs(c) > limit for c in consts):
        return None
    return [("cmp", a, b, CMP_CODES[op.name], consts)]


def mask_box(mask: Value, held, dtypes) -> list[tuple] | None:
    """`mask` as the box of tile indices where it holds, when it is one: each comparison in it
    varies along at most one axis of the tile (`cols < N`, `rows[:, None] >= lo`), so it holds on
    an interval of that axis, and their conjunction on the product of the intervals. The terms are
    ("scalar", m) or ("span", axis, a, b, code, step_a, step_b), axis None for a comparison that
    is the same everywhere; None when the mask is not a box (`rows[:, None] >= cols[None, :]`,
    `i != k` along an axis) or not of mask_terms' form."""
    return _box(mask, list(range(len(mask.shape))), held, dtypes)


def _box(v: Value, axes: list, held, dtypes) -> list[tuple] | None:
    """The box terms of bool tile `v`, whose axis k is axis axes[k] of the store's tile (None: an
    axis `v` does not vary along)."""
    op = v.owner
    if v.type.is_scalar or (op is not None and op.name == CONST):
        return [("scalar", v)]
    if op is None:
        return None
    if op.name == EXPAND_DIMS:
        return _box(op.operands[0], axes[:op.attrs["axis"]] + axes[op.attrs["axis"] + 1:], held, dtypes)
    if op.name == BROADCAST:
        src = op.operands[0]
        return _box(src, [None if src.type.is_scalar or src.shape[k] == 1 else ax for k, ax in enumerate(axes)],
                    held, dtypes)
    if op.name == TRANS:
        src_axes = [None] * len(axes)
        for k, p in enumerate(op.attrs["perm"]):
            src_axes[p] = axes[k]
        return _box(op.operands[0], src_axes, held, dtypes)
    if op.name == AND and v.dtype == D.int1:
        a, b = (_box(o, axes, held, dtypes) for o in op.operands)
        return None if a is None or b is None else a + b
    terms = mask_terms(v, held, dtypes) if op.name in CMP_CODES else None
    if not terms:
        return None
    _, a, b, code, _ = terms[0]
    zero = [0] * len(v.shape)
    sa, sb = (zero if x.type.is_scalar else _steps(x) for x in (a, b))
    varying = {k for k in range(len(zero)) if sa[k] or sb[k]}
    if len({axes[k] for k in varying}) > 1 or any(axes[k] is None for k in varying):
        return None
    if not varying:
        return [("span", None, a, b, code, 0, 0)]
    k = varying.pop()
    if code >= CMP_CODES[EQ] and sa[k] != sb[k]:
        return None
    return [("span", axes[k], a, b, code, sa[k], sb[k])]


def runtime_mask(mask: Value | None) -> Value | None:
    """`mask` when it has to be checked at run time; None for no mask or a constant true one."""
    if mask is None or (mask.owner is not None and mask.owner.name == CONST and mask.owner.attrs["value"]):
        return None
    return mask


__all__ = ["mask_terms", "mask_box", "runtime_mask", "CMP_CODES"]
