"""Which loads a loop can fetch one iteration ahead (double buffering).

A tile load in a `for` body can be issued for iteration k + 1 while iteration k computes, into the
other half of a two-slot LM buffer, when the lowering can compute its addresses ahead of time:
  - it sits at the body's top level (not in a branch or an inner loop of the body);
  - its pointer, mask and `other` are functions of the loop's induction variable, of values made
    before the loop and of carried scalars that advance by a step made before the loop (the
    offset the induction rewrite makes of Triton's `ptrs += BLOCK_K * stride`), through pure
    elementwise, view and source ops of the body and loads from arguments the body does not write
    (a paged cache's block table: the page is loaded ahead too), not through a carried tile;
  - the body (inner loops and branches included) stores and updates atomically through no
    pointer argument the load reads from, and has no barrier: the tile fetched early is the tile
    the iteration would have read. Distinct pointer arguments are taken not to overlap (a loop
    reading one argument and writing another that aliases it one iteration later is not seen).
Loads staged in SM (staging.py) keep their cluster protocol and are not prefetched here.

`ahead(fn, staged)` maps each such loop to its loads, each with the body ops its addresses need
(in body order); the lowering (codegen/prefetch.py) emits them and the memory plan gives each
load two slots, live across the loop, where the arena still fits (plan_memory's last step).
"""
from __future__ import annotations

import dataclasses

from compiler.ir import Block, Function, Op, walk_block
from compiler.ir.ops import ADD, BARRIER, CONST, FOR, LOAD, OPS, YIELD

from .stripmine import bases

_PURE_KINDS = ("elementwise", "view", "source")


@dataclasses.dataclass
class Ahead:
    load: Op
    needs: list[Op]   # ops of the body the load's operands are computed by (loads too), in body order
    # carried scalars the load reads that advance by a loop-invariant step (an offset the
    # induction rewrite made of `ptrs += BLOCK`): carried value -> its step
    advances: dict = dataclasses.field(default_factory=dict)


def ahead(fn: Function, staged: set[int]) -> dict[int, list[Ahead]]:
    """id of a `for` op -> its body's loads that can be fetched one iteration ahead."""
    out: dict[int, list[Ahead]] = {}
    for loop in walk_block(fn.body):
        if loop.name != FOR:
            continue
        found = _in_body(loop.blocks[0], staged)
        if found:
            out[id(loop)] = found
    return out


def _in_body(body: Block, staged: set[int]) -> list[Ahead]:
    written: set[int] = set()
    for op in walk_block(body):
        if op.name == BARRIER:
            return []
        if OPS[op.name].has("writes_global"):
            written |= bases(op.operands[0])
    top = {id(op): i for i, op in enumerate(body.ops)}
    found = []
    for op in body.ops:
        if op.name != LOAD or op.results[0].type.is_scalar or id(op) in staged:
            continue
        if bases(op.operands[0]) & written:
            continue
        found_ahead = _needs(op, body, top, written)
        if found_ahead is not None:
            found.append(found_ahead)
    return found


def _step(arg, body: Block, top: dict[int, int]):
    """The step of carried scalar `arg` when the body yields `arg + step` with `step` made before
    the loop; else None."""
    y = dict(zip(map(id, body.args[1:]), body.ops[-1].operands)).get(id(arg)) \
        if body.ops and body.ops[-1].name == YIELD else None
    op = y.owner if y is not None else None
    if op is None or op.name != ADD or not arg.type.is_scalar or arg not in op.operands:
        return None
    step = op.operands[1] if op.operands[0] is arg else op.operands[0]
    made_before = step.owner is None or id(step.owner) not in top or step.owner.name == CONST
    return step if step is not arg and step.type.is_scalar and made_before and step not in body.args else None


def _needs(load: Op, body: Block, top: dict[int, int], written: set[int]) -> Ahead | None:
    """`load` with the body ops its operands are computed by, or None when one of them is not a
    pure function of the induction variable, of carried scalars with a fixed step, of values made
    before the loop and of loads from arguments the body does not write (a block table's page)."""
    iv, carried = body.args[0], {id(a) for a in body.args[1:]}
    needs: dict[int, Op] = {}
    advances: dict = {}
    stack = list(load.operands)
    while stack:
        v = stack.pop()
        if v is iv or id(v) in advances:
            continue
        if id(v) in carried:
            step = _step(v, body, top)
            if step is None:
                return None
            advances[id(v)] = (v, step)
            continue
        op = v.owner
        if op is None or id(op) not in top:   # made before the loop (an argument, an outer value)
            continue
        if id(op) in needs:
            continue
        if op.name == LOAD:
            if bases(op.operands[0]) & written:
                return None
        elif not OPS[op.name].pure or OPS[op.name].kind not in _PURE_KINDS:
            return None
        needs[id(op)] = op
        stack.extend(op.operands)
    return Ahead(load, sorted(needs.values(), key=lambda o: top[id(o)]), dict(advances.values()))
