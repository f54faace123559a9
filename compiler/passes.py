"""Target-neutral IR passes: constant folding, common-subexpression elimination, dead-code
elimination and the dot-accumulate canonicalisation. `optimize` runs them in a fixed order,
so the IR a target sees (and the cache key built from it) is deterministic."""
from __future__ import annotations

import numpy as np

from . import dtypes as D
from .ir import Block, Function, Op, Value, walk_block
from .ir.analysis import const_value
from .ir.ops import ADD, CAST, DOT, MUL, OPS, SUB

_NP = {D.float32: np.float32, D.float16: np.float16, D.int32: np.int32, D.int64: np.int64, D.int1: np.bool_,
       D.int8: np.int8, D.int16: np.int16, D.uint8: np.uint8, D.uint16: np.uint16, D.uint32: np.uint32,
       D.uint64: np.uint64}


def uses(fn: Function) -> dict[int, list[Op]]:
    out: dict[int, list[Op]] = {}
    for op in fn.walk():
        for v in op.operands:
            out.setdefault(id(v), []).append(op)
    return out


def replace_all_uses(fn: Function, old: Value, new: Value) -> None:
    for op in fn.walk():
        op.operands = [new if v is old else v for v in op.operands]


def dce(fn: Function) -> None:
    changed = True
    while changed:
        used = {id(v) for op in fn.walk() for v in op.operands}
        changed = _dce_block(fn.body, used)


def _dce_block(block: Block, used: set[int]) -> bool:
    keep, changed = [], False
    for op in block.ops:
        for b in op.blocks:
            changed |= _dce_block(b, used)
        if OPS[op.name].pure and not any(id(r) in used for r in op.results):
            changed = True
            continue
        keep.append(op)
    block.ops = keep
    return changed


def _key(op: Op):
    attrs = tuple(sorted((k, repr(v)) for k, v in op.attrs.items()))
    return (op.name, tuple(id(v) for v in op.operands), attrs, tuple(str(r.type) for r in op.results))


def cse(fn: Function) -> None:
    _cse_block(fn, fn.body, {})


def _cse_block(fn: Function, block: Block, seen: dict) -> None:
    seen = dict(seen)
    keep = []
    for op in block.ops:
        for b in op.blocks:
            _cse_block(fn, b, seen)
        if OPS[op.name].pure and not op.blocks and op.name != DOT:
            k = _key(op)
            if k in seen:
                for old, new in zip(op.results, seen[k].results):
                    replace_all_uses(fn, old, new)
                continue
            seen[k] = op
        keep.append(op)
    block.ops = keep


_FOLD = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.fmax, "min": np.fmin,   # value_rules: maxNum
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "neg": np.negative,
}


def fold_constants(fn: Function) -> None:
    """Folds ops whose operands are all constants (splats), with the dtype's exact semantics."""
    for op in list(fn.walk()):
        if not op.results or not op.operands or any(const_value(v) is None for v in op.operands):
            continue
        rt = op.results[0].type
        vals = [const_value(v) for v in op.operands]
        new = None
        if OPS[op.name].has("axis_view"):
            new = vals[0]
        elif op.name == CAST and rt.dtype in _NP and op.operands[0].dtype in _NP:
            with np.errstate(all="ignore"):
                x = _NP[op.operands[0].dtype](vals[0])
                if rt.dtype.is_int() and not rt.dtype.is_bool() and op.operands[0].dtype.is_floating():
                    lo, hi = rt.dtype.int_range()
                    if not np.isfinite(x) or not lo <= x <= hi:
                        continue   # the targets saturate; numpy would not
                    x = np.trunc(x)
                new = _NP[rt.dtype](x).item()
        elif op.name in _FOLD and all(v.dtype in _NP for v in op.operands) and rt.dtype in _NP:
            with np.errstate(all="ignore"):
                args = [_NP[v.dtype](x) for v, x in zip(op.operands, vals)]
                new = _NP[rt.dtype](_FOLD[op.name](*args)).item()
        if new is None:
            continue
        op.name = "const"
        op.operands = []
        op.attrs = {"value": new, "type": rt}


def simplify_identities(fn: Function) -> None:
    """x * 1 -> x (any dtype) and x + 0, x - 0 -> x (integers and pointers: for floats -0.0 + 0.0
    is +0.0, so that one is no identity)."""
    for op in list(fn.walk()):
        if op.name not in (MUL, ADD, SUB) or len(op.operands) != 2:
            continue
        r = op.results[0]
        for i in ((0, 1) if op.name != SUB else (1,)):
            c, other = const_value(op.operands[i]), op.operands[1 - i]
            if c is None or other.type != r.type:
                continue
            if (op.name == MUL and c == 1 and not isinstance(c, bool)) or \
                    (op.name != MUL and c == 0 and not r.dtype.is_floating()):
                replace_all_uses(fn, r, other)
                break


def fold_dot_accumulate(fn: Function) -> None:
    """add(x, dot(a, b, 0)) -> dot(a, b, x): products accumulate into x in ascending k, as on
    GPU tensor cores. Both policies do this, so every target sums in the same order."""
    use = uses(fn)
    for op in list(fn.walk()):
        if op.name != ADD or not op.results[0].dtype.is_floating():
            continue
        for i in (0, 1):
            d = op.operands[i].owner
            other = op.operands[1 - i]
            if d is None or d.name != DOT or len(use.get(id(d.result), [])) != 1:
                continue
            if const_value(d.operands[2]) != 0 or d.result.type != other.type:
                continue
            if id(other) not in _available_at(fn, d):
                continue
            d.operands[2] = other
            replace_all_uses(fn, op.result, d.result)
            break
    dce(fn)


def _available_at(fn: Function, target: Op) -> set[int]:
    """Ids of the values visible at `target`: params, enclosing block args, earlier results."""
    def search(block: Block, visible: set[int]):
        visible = visible | {id(a) for a in block.args}
        for o in block.ops:
            if o is target:
                return visible
            for b in o.blocks:
                found = search(b, visible)
                if found is not None:
                    return found
            visible = visible | {id(r) for r in o.results}
        return None
    return search(fn.body, {id(p.value) for p in fn.params}) or set()


def optimize(fn: Function) -> Function:
    fold_constants(fn)
    simplify_identities(fn)
    cse(fn)
    fold_dot_accumulate(fn)
    dce(fn)
    return fn


def ops_of(fn: Function) -> list[str]:
    return [op.name for op in walk_block(fn.body)]
