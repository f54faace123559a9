"""64-bit integers on a chip whose registers, `long` and `void*` are 32-bit.

Kernels write `pid.to(tl.int64) * stride` to be safe on 64-bit targets, load int64 token ids
and labels, and compare them. Each int64 value is kept in one of two forms:

- *narrowed* to int32 when every use only needs it modulo 2**32: `+`, `-`, `*`, negation, `where`,
  sums, views, narrowing casts, loop carries and pointer offsets agree with 64-bit arithmetic in
  the low 32 bits, and a device address *is* a value modulo 2**32 (the launcher refuses tensors
  over 2**31-1 bytes, so every in-bounds offset is representable);
- *wide* otherwise: compared, divided, shifted, converted to float, reduced by max/min, stored.
  A wide value's int64 operands are wide too (its high half must be exact), as are loads and
  arguments of int64 (their values are what they are). Wide values are `tj_i64` in the emitted
  code: two 32-bit halves with the arithmetic in tilejit_xpu.h.

The pass rewrites a copy of the IR: narrowed values become int32 (constants modulo 2**32), and a
narrowing cast is inserted where a narrowed op reads a wide value.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Block, Function, Op, TileType, Value
from compiler.ir.ops import CAST, CONST, FOR, IF, LOAD, OPS, REDUCE, STORE, WHERE, WHILE, YIELD

from .rebuild import Emitter


def _needs_width(op: Op, v: Value) -> bool:
    """Whether `op` reading int64 `v` needs all 64 bits of it."""
    d = OPS[op.name]
    if d.has("ring") or op.name == WHERE:   # exact modulo 2**32 (where: on its branches)
        return False
    if d.kind == "view" or op.name in (FOR, WHILE, YIELD):
        return False   # carried: as wide as the slot it joins (wide_values)
    if op.name == CAST:
        to = op.attrs["to"]
        return not (to.is_int() and not to.is_bool() and (to.bits < 64 or to is D.int64))
    if op.name == REDUCE:
        return op.attrs["kind"] != "sum"
    if op.name == LOAD:
        return False          # as an address offset
    if op.name == STORE:
        return v is op.operands[1]
    return True


def wide_values(fn: Function) -> set[int]:
    """Ids of the int64 values that keep 64 bits."""
    # the values that are one slot: a loop's carried value (init, block arguments, yield, result),
    # an if's result and what each branch yields for it
    groups: dict[int, list[Value]] = {}

    def join(*vals):
        members = []
        for v in vals:
            members += groups.get(id(v), [v])
        for v in members:
            groups[id(v)] = members

    wide: list[Value] = [p.value for p in fn.params if p.type.dtype is D.int64]
    for op in fn.walk():
        if op.name == FOR:
            body = op.blocks[0]
            join(body.args[0], *op.operands[:3])
            for init, arg, y, r in zip(op.operands[3:], body.args[1:], body.ops[-1].operands, op.results):
                join(init, arg, y, r)
        if op.name == IF:
            for i, r in enumerate(op.results):
                join(r, *(b.ops[-1].operands[i] for b in op.blocks))
        if op.name == WHILE:
            cond, body = op.blocks
            for i, r in enumerate(op.results):
                join(op.operands[i], cond.args[i], body.args[i], body.ops[-1].operands[i], r)
        if op.name == LOAD and op.results[0].dtype is D.int64:
            wide.append(op.results[0])
        wide += [v for v in op.operands if v.dtype is D.int64 and _needs_width(op, v)]
    out: set[int] = set()
    while wide:
        v = wide.pop()
        if id(v) in out:
            continue
        for m in groups.get(id(v), [v]):
            out.add(id(m))
            op = m.owner
            if op is not None and op.name not in (LOAD, FOR):
                wide += [o for o in op.operands if o.dtype is D.int64]
    return out


def narrow(fn: Function) -> Function:
    """A copy of `fn` with the int64 values that only need 32 bits computed in int32."""
    if not any(v.dtype is D.int64 for op in fn.walk() for v in (*op.operands, *op.results)) and \
            not any(p.type.dtype is D.int64 for p in fn.params):
        return fn
    wide = wide_values(fn)
    vmap = {id(p.value): p.value for p in fn.params}
    body = Block()
    _block(fn.body, body, vmap, wide)
    return Function(fn.name, fn.params, body, fn.specialization)


def _narrow_type(v: Value, wide: set[int]) -> TileType:
    return v.type.with_dtype(D.int32) if v.dtype is D.int64 and id(v) not in wide else v.type


def _block(old: Block, new: Block, vmap: dict[int, Value], wide: set[int]) -> None:
    for op in old.ops:
        em = Emitter(new, op.loc)
        operands = []
        for v in op.operands:
            x = vmap[id(v)]
            if x.dtype is D.int64 and not _reads_wide(op, v, wide):
                x = em.v("cast", [x], {"to": D.int32})
            operands.append(x)
        attrs = dict(op.attrs)
        if op.name == CAST and attrs["to"] is D.int64 and id(op.results[0]) not in wide:
            attrs["to"] = D.int32
        if op.name == CONST and attrs["type"].dtype is D.int64 and id(op.results[0]) not in wide:
            attrs["type"] = attrs["type"].with_dtype(D.int32)
            attrs["value"] = (int(attrs["value"]) + 2 ** 31) % 2 ** 32 - 2 ** 31
        blocks = []
        for b in op.blocks:
            args = [Value(_narrow_type(a, wide), a.loc) for a in b.args]
            vmap.update({id(a): n for a, n in zip(b.args, args)})
            nb = Block(args)
            _block(b, nb, vmap, wide)
            blocks.append(nb)
        # an op computing in 64 bits (a division of a wide value) keeps its int64 result, narrowed after
        computes_wide = op.name not in (CAST, FOR, LOAD) and not op.blocks and \
            any(x.dtype is D.int64 for x in operands)
        types = [r.type if computes_wide else _narrow_type(r, wide) for r in op.results]
        new_op = Op(op.name, operands, types, attrs, blocks, op.loc)
        new.append(new_op)
        for r, n in zip(op.results, new_op.results):
            if computes_wide and n.dtype is D.int64 and id(r) not in wide:
                n = Emitter(new, op.loc).v("cast", [n], {"to": D.int32})
            vmap[id(r)] = n


def _reads_wide(op: Op, v: Value, wide: set[int]) -> bool:
    """Whether `op` reads int64 `v` with all 64 bits (else it is narrowed first)."""
    if op.name == FOR:
        i = op.operands.index(v)
        return id(op.blocks[0].args[0]) in wide if i < 3 else id(op.results[i - 3]) in wide
    if op.name == WHILE:
        return id(op.results[op.operands.index(v)]) in wide
    if op.name in (YIELD, CAST) or _needs_width(op, v):
        return True   # a yield's slot is wide with its value; a cast narrows or converts itself
    return any(id(r) in wide for r in op.results)
