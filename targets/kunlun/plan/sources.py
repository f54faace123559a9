"""Shared shape-only values, given one copy per use before the dimension analysis.

CSE leaves one `arange(0, 32)` for a matmul's rows, columns and k when the three blocks are 32,
and one zero tile for an accumulator and a load's `other`. Such values carry no data, but sharing
them would join independent dimensions (dims.py). Every value computed from constants, aranges
and scalars only (sources, views and elementwise ops over them) is therefore rebuilt at each of
its uses; the C lowering evaluates these inline anyway, so no local memory is spent on them.
"""
from __future__ import annotations

from compiler.ir import Block, Function, Op, Value
from compiler.ir.ops import OPS
from compiler.passes import dce

from .passes import clone_plain
from .rebuild import Emitter


def _shape_only(v: Value, memo: dict[int, bool]) -> bool:
    if v.type.is_scalar:
        return True
    got = memo.get(id(v))
    if got is None:
        op = v.owner
        kind = OPS[op.name].kind if op is not None and op.name in OPS else None
        got = op is not None and not op.blocks and kind in ("source", "view", "elementwise") and \
            all(_shape_only(o, memo) for o in op.operands)
        memo[id(v)] = got
    return got


def split_shared(fn: Function) -> Function:
    uses: dict[int, int] = {}
    for op in fn.walk():
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    memo: dict[int, bool] = {}

    def shared(v: Value) -> bool:
        return not v.type.is_scalar and uses.get(id(v), 0) > 1 and _shape_only(v, memo)

    body = Block()
    vmap = {id(p.value): p.value for p in fn.params}
    _block(fn.body, body, vmap, shared)
    out = Function(fn.name, fn.params, body, fn.specialization)
    dce(out)   # the originals of values now rebuilt at every use
    return out


def _block(old: Block, new: Block, vmap: dict[int, Value], shared) -> None:
    for op in old.ops:
        em = Emitter(new, op.loc)
        operands = [_fresh(v, em, vmap) if shared(v) else vmap[id(v)] for v in op.operands]
        blocks = []
        for b in op.blocks:
            args = [Value(a.type, a.loc) for a in b.args]
            vmap.update({id(a): n for a, n in zip(b.args, args)})
            nb = Block(args)
            _block(b, nb, vmap, shared)
            blocks.append(nb)
        new_op = Op(op.name, operands, [r.type for r in op.results], dict(op.attrs), blocks, op.loc)
        new.append(new_op)
        vmap.update({id(r): n for r, n in zip(op.results, new_op.results)})


def _fresh(v: Value, em: Emitter, vmap: dict[int, Value]) -> Value:
    """A new copy of shape-only `v` (and of its shape-only tile operands) appended to em's block."""
    op = v.owner
    local: dict[int, Value] = {}
    for o in op.operands:
        if not o.type.is_scalar:
            local[id(o)] = _fresh(o, em, vmap)
    new = clone_plain(em, op, lambda x: local.get(id(x)) or vmap[id(x)])
    return new.results[op.results.index(v)]


__all__ = ["split_shared"]
