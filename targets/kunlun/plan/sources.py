"""Shared values, given one copy per use before the dimension analysis.

CSE leaves one `arange(0, 32)` for a matmul's rows, columns and k when the three blocks are 32,
and one zero tile for an accumulator and a load's `other`. Such values carry no data, but sharing
them would join independent dimensions (dims.py). Every value computed from constants, aranges
and scalars only (sources, views and elementwise ops over them) is therefore rebuilt at each of
its uses; the C lowering evaluates these inline anyway, so no local memory is spent on them.

With `reload=True` (the search's fallback, for kernels no plan fits otherwise), loaded tiles are
rebuilt per use too: a load from a tensor the kernel never writes, and views and elementwise ops
over such loads. A tile used in two roles joins two axes into one dimension, which then cannot
be cut: `k` in `dot(k, trans(k))` (K·Kᵀ) gives the rows and the columns of the product one
dimension, as `g[:, None] - g[None, :]` does. Read once per role, each role is a dimension of its
own; the price is the second read from GM.
"""
from __future__ import annotations

from compiler.ir import Block, Function, Op, Value
from compiler.ir.ops import IF, LOAD, OPS
from compiler.passes import dce

from .passes import clone_plain
from .rebuild import Emitter
from .stripmine import bases, stored_bases


def _rebuildable(v: Value, memo: dict[int, bool], reload: frozenset | None) -> bool:
    """Whether `v` can be computed again where it is used: from constants, aranges and scalars
    (and, with `reload`, loads through pointers whose bases the kernel never stores to)."""
    if v.type.is_scalar:
        return True
    got = memo.get(id(v))
    if got is None:
        op = v.owner
        kind = OPS[op.name].kind if op is not None and op.name in OPS else None
        if op is not None and op.name == LOAD and reload is not None:
            got = not (bases(op.operands[0]) & reload) and \
                all(_rebuildable(o, memo, reload) for o in op.operands)
        else:
            got = op is not None and not op.blocks and kind in ("source", "view", "elementwise") and \
                all(_rebuildable(o, memo, reload) for o in op.operands)
        memo[id(v)] = got
    return got


def split_shared(fn: Function, reload: bool = False) -> Function:
    uses: dict[int, int] = {}
    for op in fn.walk():
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    memo: dict[int, bool] = {}
    written = frozenset(stored_bases(fn.body)) if reload else None

    def shared(v: Value) -> bool:
        return not v.type.is_scalar and uses.get(id(v), 0) > 1 and _rebuildable(v, memo, written)

    body = Block()
    vmap = {id(p.value): p.value for p in fn.params}
    _block(fn.body, body, vmap, shared, reload)
    out = Function(fn.name, fn.params, body, fn.specialization)
    dce(out)   # the originals of values now rebuilt at every use
    if reload:
        _prune(out.body)   # and loads nobody reads now
    return out


def _block(old: Block, new: Block, vmap: dict[int, Value], shared, split_ifs: bool = False) -> None:
    for op in old.ops:
        em = Emitter(new, op.loc)
        operands = [_fresh(v, em, vmap) if shared(v) else vmap[id(v)] for v in op.operands]
        if split_ifs and op.name == IF and len(op.results) > 1 and not _has_effects(op):
            # one `if` per result, so that a result with a cut axis and one without part ways
            for r in op.results:
                new_op = _if_of(op, [r], operands[0], vmap, shared)
                new.append(new_op)
                vmap[id(r)] = new_op.results[0]
            continue
        blocks = []
        for b in op.blocks:
            args = [Value(a.type, a.loc) for a in b.args]
            vmap.update({id(a): n for a, n in zip(b.args, args)})
            nb = Block(args)
            _block(b, nb, vmap, shared, split_ifs)
            blocks.append(nb)
        new_op = Op(op.name, operands, [r.type for r in op.results], dict(op.attrs), blocks, op.loc)
        new.append(new_op)
        vmap.update({id(r): n for r, n in zip(op.results, new_op.results)})


def _has_effects(op: Op) -> bool:
    return OPS[op.name].has("effect") or any(_has_effects(o) for b in op.blocks for o in b.ops)


def _if_of(op: Op, results: list[Value], cond: Value, vmap: dict[int, Value], shared) -> Op:
    """A copy of `if` op `op` that yields only `results` (its branches pruned to what they need)."""
    keep = [op.results.index(r) for r in results]
    blocks = []
    for b in op.blocks:
        nb = Block([])
        _block(b, nb, vmap, shared, True)
        y = nb.ops[-1]
        y.operands = [y.operands[i] for i in keep]
        _prune(nb)
        blocks.append(nb)
    return Op(IF, [cond], [r.type for r in results], {**op.attrs, "types": [r.type for r in results]}, blocks,
              op.loc)


def _prune(block: Block) -> None:
    """Drops the ops of `block` (nested blocks too) whose results nobody reads: pure ops and loads
    (a block's values are read in it or in the blocks nested in it only)."""
    for op in block.ops:
        for b in op.blocks:
            _prune(b)
    while True:
        used = {id(v) for op in block.ops for v in _reads(op)}
        keep = [op for op in block.ops if not (op.results and not any(id(r) in used for r in op.results)
                                                and (OPS[op.name].pure or op.name == LOAD))]
        if len(keep) == len(block.ops):
            return
        block.ops = keep


def _reads(op: Op):
    yield from op.operands
    for b in op.blocks:
        for o in b.ops:
            yield from _reads(o)


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
