"""Loop-carried pointer and index tiles that advance by one scalar each iteration, carried as a
scalar instead (`a_ptrs += BLOCK_K * stride_ak` in a matmul's K loop).

Such a tile is its initial tile plus the sum of the steps so far, exactly (pointer and wrapping
integer arithmetic are associative), so the loop carries that sum and the tile is recomputed
where it is read, as the inline index expression the lowering makes of integer arithmetic. The
tile then needs no local memory at all, where a carried tile would hold one 4-byte pointer per
element.
"""
from __future__ import annotations

from compiler.ir import Block, Function, Op, TileType, Value
from compiler.ir.ops import ADD, BROADCAST, CONST, FOR
from compiler.passes import dce

from .rebuild import Emitter


def _step(arg: Value, y: Value):
    """The scalar step when `y` is arg + broadcast(x) or arg + a splat constant (either order): the
    scalar value `x`, or the constant as (value, dtype); else None."""
    op = y.owner
    if op is None or op.name != ADD or arg not in op.operands:
        return None
    other = op.operands[1] if op.operands[0] is arg else op.operands[0]
    if other is arg:
        return None
    src = other.owner
    if src is not None and src.name == BROADCAST and src.operands[0].type.is_scalar:
        return src.operands[0]
    if src is not None and src.name == CONST:
        return (src.attrs["value"], other.dtype)
    return None


def _inductions(op: Op) -> dict[int, Value]:
    """slot -> scalar step, for the carried tiles of loop `op` that advance uniformly."""
    body = op.blocks[0]
    out = {}
    for j, (arg, y) in enumerate(zip(body.args[1:], body.ops[-1].operands)):
        if arg.type.is_scalar or not (arg.dtype.is_ptr() or (arg.dtype.is_int() and not arg.dtype.is_bool())):
            continue
        x = _step(arg, y)
        dt = x[1] if isinstance(x, tuple) else (x.dtype if x is not None else None)
        if dt is not None and dt.is_int() and not dt.is_bool():
            out[j] = x
    return out


def scalarize(fn: Function) -> Function:
    if not any(op.name == FOR and _inductions(op) for op in fn.walk()):
        return fn
    vmap = {id(p.value): p.value for p in fn.params}
    body = Block()
    _block(fn.body, body, vmap)
    out = Function(fn.name, fn.params, body, fn.specialization)
    dce(out)
    return out


def _block(old: Block, new: Block, vmap: dict[int, Value]) -> None:
    for op in old.ops:
        ind = _inductions(op) if op.name == FOR else {}
        if ind:
            _loop(op, ind, new, vmap)
            continue
        blocks = []
        for b in op.blocks:
            args = [Value(a.type, a.loc) for a in b.args]
            vmap.update({id(a): n for a, n in zip(b.args, args)})
            nb = Block(args)
            _block(b, nb, vmap)
            blocks.append(nb)
        new_op = Op(op.name, [vmap[id(v)] for v in op.operands], [r.type for r in op.results], dict(op.attrs),
                    blocks, op.loc)
        new.append(new_op)
        vmap.update({id(r): n for r, n in zip(op.results, new_op.results)})


def _dtype(x):
    return x[1] if isinstance(x, tuple) else x.dtype


def _loop(op: Op, ind: dict[int, Value], new: Block, vmap: dict[int, Value]) -> None:
    em = Emitter(new, op.loc)
    body = op.blocks[0]
    keep = [j for j in range(len(body.args) - 1) if j not in ind]
    inits = [vmap[id(op.operands[3 + j])] for j in range(len(body.args) - 1)]
    zeros = [em.const(0, _dtype(ind[j])) for j in ind]
    iv = Value(body.args[0].type, body.args[0].loc)
    kept_args = [Value(body.args[1 + j].type, body.args[1 + j].loc) for j in keep]
    offs = [Value(TileType(_dtype(ind[j])), body.args[1 + j].loc) for j in ind]
    nb = Block([iv] + kept_args + offs)
    bem = Emitter(nb, op.loc)
    vmap[id(body.args[0])] = iv
    for j, a in zip(keep, kept_args):
        vmap[id(body.args[1 + j])] = a
    for j, off in zip(ind, offs):   # the tile = its initial value + the steps so far
        arg = body.args[1 + j]
        vmap[id(arg)] = bem.v("add", [inits[j], bem.splat(off, arg.shape)])
    y = body.ops[-1]
    for b in body.ops[:-1]:
        _block(_single(b), nb, vmap)
    bem.loc = y.loc
    steps = [bem.v("add", [off, bem.const(*ind[j]) if isinstance(ind[j], tuple) else vmap[id(ind[j])]])
             for j, off in zip(ind, offs)]
    bem.op("yield", [vmap[id(y.operands[j])] for j in keep] + steps)
    loop = em.op("for", [vmap[id(v)] for v in op.operands[:3]] + [inits[j] for j in keep] + zeros,
                 dict(op.attrs), [nb])
    for j, r in zip(keep, loop.results):
        vmap[id(op.results[j])] = r
    for j, total in zip(ind, loop.results[len(keep):]):
        vmap[id(op.results[j])] = em.v("add", [inits[j], em.splat(total, op.results[j].shape)])


def _single(op: Op) -> Block:
    b = Block()
    b.ops = [op]
    return b


