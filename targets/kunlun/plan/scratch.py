"""The GM scratch tier: loop-carried tiles that LM cannot hold and no cut can shrink, kept in a
per-core workspace in global memory and streamed through LM by DMA.

A loop whose body reduces along a carried tile's axis (a top-k that takes the row's maximum once
per iteration, a sort network) cannot be cut along that axis: every iteration needs the whole
tile. `spill_carried` rewrites such a loop so that it carries nothing of the tile: the initial
value is stored to a scratch tensor before the loop, each iteration loads it at the top of its
body and stores the next value at the end, and the result is loaded after the loop. The scratch
is a pointer parameter the plan adds to the function (named `tj_scratch<i>`); its loads and
stores are ordinary ones, so the strip-mining that follows cuts the body chunk by chunk (the
loads re-read in each pass, the store in the last), the fences, the prefetch stage and the cost
model see them like any other, and the host emulation checks them against the workspace's bounds.

The kernel template gives each core its own slot of one workspace (`tj_ws`, allocated by the
launcher once per kernel and size): a core runs one program at a time, so a slot per core is a
slot per running program. `scratch_layout` says where each scratch tensor lies in a slot.
"""
from __future__ import annotations

import dataclasses
import os

from compiler import dtypes as D
from compiler.ir import Block, Function, Op, Param, TileType, Value
from compiler.ir.ops import DOT, FOR, OPS

from .dims import Dims
from .model import align, source_name
from .rebuild import Emitter


def spill_allowed() -> bool:
    """Whether the plan may go past its first try: read a tile once per role or keep tiles in GM
    scratch. TILEJIT_KUNLUN_SPILL=0 keeps LMBudgetError for a kernel that needs either (for whoever
    wants to know that a kernel moves its tiles through GM beyond the cuts' re-reads)."""
    return os.environ.get("TILEJIT_KUNLUN_SPILL", "1") != "0"


PREFIX = "tj_scratch"


@dataclasses.dataclass(frozen=True)
class Scratch:
    """One scratch tensor of a program's slot: its parameter, element type, elements and offset."""

    name: str
    dtype: D.dtype
    numel: int
    offset: int           # bytes from the slot's start
    what: str             # the tile it holds, for the plan listing

    @property
    def nbytes(self) -> int:
        return self.numel * _bytes(self.dtype)


def _bytes(dt: D.dtype) -> int:
    return max(1, dt.bits // 8)


def is_scratch(p: Param) -> bool:
    return p.name.startswith(PREFIX)


def scratch_layout(fn: Function, what: dict[str, str] | None = None) -> list[Scratch]:
    """The scratch tensors of `fn` (its `tj_scratch` parameters) laid out in one slot."""
    out, at = [], 0
    for p in fn.params:
        if is_scratch(p):
            numel = p.hints["numel"]
            dt = p.type.dtype.element_ty
            out.append(Scratch(p.name, dt, numel, at, (what or {}).get(p.name, p.hints.get("what", ""))))
            at += align(numel * _bytes(dt))   # each starts on a DMA- and vector-friendly boundary
    return out


def spillable_loops(fn: Function) -> list[tuple[Op, list[int]]]:
    """(`for` loop, positions of its carried tiles) for every loop whose body reduces, scans or
    contracts along an axis of a tile it carries: the loops the strip-miner cannot cut there."""
    dims = Dims(fn)
    out = []
    for op in fn.walk():
        if op.name != FOR:
            continue
        body = op.blocks[0]
        reduced = set()
        for o in _walk(body):
            if OPS[o.name].kind in ("reduce", "scan"):
                c = dims.cls(o.operands[0], o.attrs["axis"]) if o.operands[0].shape[o.attrs["axis"]] > 1 else None
                reduced.add(c)
            elif o.name == DOT and o.operands[0].shape[1] > 1:
                reduced.add(dims.cls(o.operands[0], 1))
        reduced.discard(None)
        carried = [j for j, a in enumerate(body.args[1:])
                   if a.shape and any(dims.cls(a, ax) in reduced for ax, n in enumerate(a.shape) if n > 1)]
        if carried:
            out.append((op, carried))
    return out


def _walk(block: Block):
    for o in block.ops:
        yield o
        for b in o.blocks:
            yield from _walk(b)


def spill_carried(fn: Function, loops: list[tuple[Op, list[int]]]) -> Function:
    """`fn` with the carried tiles at the given positions of the given loops kept in scratch."""
    params = list(fn.params)
    targets = {id(loop): carried for loop, carried in loops}
    body = Block()
    vmap = {id(p.value): p.value for p in fn.params}
    _Rewrite(params, targets, vmap).block(fn.body, body)
    return Function(fn.name, params, body, fn.specialization)


class _Rewrite:
    def __init__(self, params: list[Param], targets: dict[int, list[int]], vmap: dict[int, Value]):
        self.params, self.targets, self.vmap = params, targets, vmap

    def get(self, v: Value) -> Value:
        return self.vmap[id(v)]

    def block(self, old: Block, new: Block) -> None:
        for op in old.ops:
            em = Emitter(new, op.loc)
            if id(op) in self.targets:
                self.loop(op, self.targets[id(op)], em)
                continue
            blocks = []
            for b in op.blocks:
                args = [Value(a.type, a.loc) for a in b.args]
                self.vmap.update({id(a): n for a, n in zip(b.args, args)})
                nb = Block(args)
                self.block(b, nb)
                blocks.append(nb)
            new_op = Op(op.name, [self.get(v) for v in op.operands], [r.type for r in op.results], dict(op.attrs),
                        blocks, op.loc)
            new.append(new_op)
            self.vmap.update({id(r): n for r, n in zip(op.results, new_op.results)})

    def scratch(self, v: Value) -> Value:
        """A new scratch parameter that holds a tile shaped like `v`."""
        name = f"{PREFIX}{sum(is_scratch(p) for p in self.params)}"
        t = TileType(D.pointer_type(v.dtype))
        p = Param(name, t, Value(t), {"numel": v.type.numel, "what": _describe(v)})
        self.params.append(p)
        return p.value

    def loop(self, op: Op, carried: list[int], em: Emitter) -> None:
        old_body = op.blocks[0]
        inits = op.operands[3:]
        spots = {j: self.scratch(inits[j]) for j in carried}
        for j, p in spots.items():
            em.op("store", [_pointers(em, p, inits[j].shape), self.get(inits[j])])
        keep = [j for j in range(len(inits)) if j not in spots]
        args = [Value(old_body.args[0].type, old_body.args[0].loc)] + \
            [Value(old_body.args[1 + j].type, old_body.args[1 + j].loc) for j in keep]
        nb = Block(args)
        self.vmap[id(old_body.args[0])] = args[0]
        self.vmap.update({id(old_body.args[1 + j]): a for j, a in zip(keep, args[1:])})
        inner = Emitter(nb, op.loc)
        for j, p in spots.items():   # this iteration's value, from scratch
            self.vmap[id(old_body.args[1 + j])] = inner.v("load", [_pointers(inner, p, inits[j].shape)])
        y = old_body.ops[-1]
        ops = Block(old_body.args)
        ops.ops = old_body.ops[:-1]
        self.block(ops, nb)
        for j, p in spots.items():   # the next iteration's value, to scratch
            Emitter(nb, y.loc).op("store", [_pointers(Emitter(nb, y.loc), p, inits[j].shape), self.get(y.operands[j])])
        Emitter(nb, y.loc).op("yield", [self.get(y.operands[j]) for j in keep])
        new = em.op("for", [self.get(v) for v in op.operands[:3]] + [self.get(inits[j]) for j in keep],
                    dict(op.attrs), [nb])
        for j, r in zip(keep, new.results):
            self.vmap[id(op.results[j])] = r
        for j, p in spots.items():   # the loop's result, from scratch
            self.vmap[id(op.results[j])] = em.v("load", [_pointers(em, p, inits[j].shape)])


def _pointers(em: Emitter, base: Value, shape) -> Value:
    """The pointer tile of a row-major tile of `shape` at `base`."""
    shape = tuple(shape)
    lin = None
    stride = 1
    for ax in reversed(range(len(shape))):
        idx = em.v("arange", [], {"start": 0, "end": shape[ax]})
        for k in range(len(shape)):
            if k != ax:
                idx = em.v("expand_dims", [idx], {"axis": k})
        if stride != 1:
            idx = em.v("mul", [idx, em.splat(em.i32(stride), idx.shape)])
        if idx.shape != shape:
            idx = em.v("broadcast", [idx], {"shape": shape})
        lin = idx if lin is None else em.v("add", [lin, idx])
        stride *= shape[ax]
    return em.v("add", [em.splat(base, shape), lin])


def _describe(v: Value) -> str:
    name = source_name(v)
    return f"'{name}'" if name else f"a {v.type}"
