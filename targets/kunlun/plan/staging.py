"""Which loads the cores of a cluster can share through shared memory (SM staging).

Programs that differ only in `program_id(0)` often re-read the same tiles: attention's query
blocks of one (batch, head) all walk the same K and V. On Kunlun the cores of a cluster share
256 KB of SM, so one core (the team's leader) can load such a tile from GM once, copy it into SM,
and the others copy it from there: the GM traffic of that load falls by the team's size.

A load is staged when
  - its tile does not depend on `program_id(0)` (pointer, mask and `other`), so every program of
    a team reads the same bytes, and
  - it sits in a loop (a tile loaded once per program is not worth two cluster barriers), and
  - every loop and branch around it is decided by the arguments alone, not by any program id:
    each core of a cluster must reach every `sync_cluster()` equally often, and the teams of one
    cluster work on different `program_id(1)`/`program_id(2)` values;
  - with one exception: a loop of the kernel's top level whose trip count alone depends on the
    program (causal attention's key loop ends at the query block's diagonal) is *shadowed*: it
    runs to the longest trip count among the cluster's cores (`tj_cluster_max`), the program's
    own iterations run the body, and the others only the staged loads with their barriers (the
    leader still loads while a program of its team runs that iteration). The start and a positive
    constant step are the same on every core, so iteration k loads the same tile in a team; a load
    that reads a value the loop carries is not staged there, since the extra iterations do not
    update it.
Kernels with atomics are not staged: a team runs ghost programs (a repeat of its last real one,
stores switched off) to keep the barrier counts equal, and an atomic cannot be switched off by a
guard as cheaply as a store.

`stageable(fn)` answers with the ids of the load ops and of the shadowed loops; the lowering
emits them (lowering.py `_staged_load`, `_shadow`), the kernel template maps programs to teams (templates/kernel.xpu.j2) and the
emulation runs the cores of a cluster concurrently so its barrier is a real one.
"""
from __future__ import annotations

import dataclasses

from compiler.ir import Block, Function, Op, walk_block
from compiler.ir.analysis import const_value
from compiler.ir.ops import FOR, IF, LOAD, OPS, PROGRAM_ID, WHILE, YIELD

from .scratch import is_scratch


class _Taint:
    """The values that depend on the program ids in `axes` or on `seeds`: data flow, and the loops'
    carried values (a fixpoint over the back edges)."""

    def __init__(self, axes: tuple[int, ...], seeds=()):
        self.axes = axes
        self.bad: set[int] = {id(v) for v in seeds}

    def mark(self, values) -> bool:
        new = [v for v in values if id(v) not in self.bad]
        self.bad.update(id(v) for v in new)
        return bool(new)

    def block(self, b: Block) -> bool:
        return any([self.op(op) for op in b.ops])   # a list: every op is visited

    @staticmethod
    def yielded(b: Block) -> list:
        return b.ops[-1].operands if b.ops and b.ops[-1].name == YIELD else []

    def op(self, op: Op) -> bool:
        hit = any(id(v) in self.bad for v in op.operands) or \
            (op.name == PROGRAM_ID and op.attrs["axis"] in self.axes)
        if OPS[op.name].has("has_region"):
            return getattr(self, "_" + op.name)(op, hit)
        changed = any([self.block(b) for b in op.blocks])
        return self.mark(op.results if hit else ()) or changed

    def _for(self, op: Op, hit: bool) -> bool:
        body = op.blocks[0]
        lb, ub, st = op.operands[:3]
        changed = self.mark(body.args[:1] if id(lb) in self.bad or id(st) in self.bad else ())
        changed |= self.mark([a for a, init in zip(body.args[1:], op.operands[3:]) if id(init) in self.bad])
        while True:
            changed |= self.block(body)
            if not self.mark([a for a, y in zip(body.args[1:], self.yielded(body)) if id(y) in self.bad]):
                break
            changed = True
        return self.mark([r for r, a in zip(op.results, body.args[1:])
                          if id(a) in self.bad or id(ub) in self.bad]) or changed

    def _while(self, op: Op, hit: bool) -> bool:
        args = [a for b in op.blocks for a in b.args]
        changed = self.mark([a for b in op.blocks for a, init in zip(b.args, op.operands) if id(init) in self.bad])
        while True:
            changed |= self.block(op.blocks[0]) | self.block(op.blocks[1])
            back = any(id(y) in self.bad for b in op.blocks for y in self.yielded(b))
            if not (back and self.mark(args)):   # the condition, or a value carried round
                break
            changed = True
        return self.mark(op.results if any(id(a) in self.bad for a in op.blocks[0].args) else ()) or changed

    def _if(self, op: Op, hit: bool) -> bool:
        changed = any([self.block(b) for b in op.blocks])
        return self.mark([r for i, r in enumerate(op.results)
                          if hit or any(id(self.yielded(b)[i]) in self.bad for b in op.blocks)]) or changed


def _tainted(fn: Function, axes: tuple[int, ...], seeds=()) -> set[int]:
    """Ids of the values that depend on `program_id(a)` for an `a` in `axes`, or on a value of
    `seeds`."""
    t = _Taint(axes, seeds)
    # one pass: a value is defined before its uses, and each loop reaches its own fixpoint over
    # its back edges, so nothing marked later can reach an op already visited
    t.block(fn.body)
    return t.bad


def _uniform(op: Op, by_pid: set[int]) -> bool:
    """Whether every core of a cluster takes the same path through control op `op`."""
    if op.name == FOR:
        return not any(id(v) in by_pid for v in op.operands[:3])
    if op.name == IF:
        return id(op.operands[0]) not in by_pid
    if op.name == WHILE:
        return id(op.blocks[0].ops[-1].operands[0]) not in by_pid   # the condition
    return True


@dataclasses.dataclass(frozen=True)
class Staging:
    loads: frozenset[int]       # ids of the load ops staged in SM
    shadowed: frozenset[int]    # ids of the top-level loops run to the cluster's longest trip count


def _may_shadow(op: Op, by_pid: set[int]) -> bool:
    """A top-level `for` whose trip count alone depends on the program: a positive constant step
    and a start the same on every core, so iteration k has the same `iv` everywhere."""
    lb, ub, st = op.operands[:3]
    step = const_value(st)
    return op.name == FOR and isinstance(step, int) and step > 0 and id(lb) not in by_pid \
        and id(st) not in by_pid


def shadow_slice(body: Block, load: Op) -> set[int] | None:
    """Ids of the ops of a shadowed loop's `body` (nested blocks included) that `load`'s operands
    need: what the shadow iterations compute again. None when one of them is a loop or branch
    result, which the shadow does not compute."""
    made = {id(r): op for op in walk_block(body) for r in op.results}
    need: set[int] = set()
    stack = [load]
    while stack:
        for v in stack.pop().operands:
            d = made.get(id(v))
            if d is None or id(d) in need:
                continue
            if d.blocks:
                return None
            need.add(id(d))
            stack.append(d)
    return need


def stageable(fn: Function) -> Staging:
    """The loads of `fn` whose tiles a cluster's cores can share through SM, and the loops that
    must run to the cluster's longest trip count for it (see the module's docstring)."""
    if any(op.name.startswith("atomic") for op in fn.walk()):
        return Staging(frozenset(), frozenset())
    # a GM scratch tile is the core's own (scratch.py): as much the program's as program_id(0)
    own = [p.value for p in fn.params if is_scratch(p)]
    by_pid0 = _tainted(fn, (0,), own)
    by_pid = _tainted(fn, (0, 1, 2), own)
    found: set[int] = set()
    shadowed: set[int] = set()

    def block_into(out: set[int], ops: list[Op], in_loop: bool, stale: set[int]) -> None:
        for op in ops:
            if op.name == LOAD and in_loop and not op.results[0].type.is_scalar \
                    and not any(id(v) in by_pid0 or id(v) in stale for v in op.operands):
                out.add(id(op))
            if op.blocks and (not OPS[op.name].has("has_region") or _uniform(op, by_pid)):
                for nb in op.blocks:
                    block_into(out, nb.ops, in_loop or OPS[op.name].has("loop"), stale)

    for op in fn.body.ops:
        if op.blocks and op.name == FOR and not _uniform(op, by_pid) and _may_shadow(op, by_pid):
            # its extra iterations change no carried value: a load that reads one would differ
            inner: set[int] = set()
            block_into(inner, op.blocks[0].ops, True, _tainted(fn, (), op.blocks[0].args[1:]))
            loads = {o for o in walk_block(op.blocks[0]) if id(o) in inner}
            kept = {id(o) for o in loads if shadow_slice(op.blocks[0], o) is not None}
            if kept:
                found |= kept
                shadowed.add(id(op))
        else:
            block_into(found, [op], False, set())
    return Staging(frozenset(found), frozenset(shadowed))


def team_size(g0: int, cores: int, slot: int, sm_bytes: int) -> int:
    """Programs per team at launch (tilejit_xpu.h's tj_team_size, the rule the kernel runs): a
    power of two no larger than the cluster, enough for `g0` programs along axis 0 where the
    cluster's SM holds one `slot` per team; 1 (no staging) for one program or no staged tile."""
    if g0 < 2 or slot <= 0:
        return 1
    t = 2
    while t < g0 and t < cores:
        t *= 2
    while t < cores and (cores // t) * slot > sm_bytes:
        t *= 2
    return t if t <= cores and cores % t == 0 and (cores // t) * slot <= sm_bytes else 1


def votes_bytes(cores: int) -> int:
    """SM at the start of a staged kernel's arena: one int per core (tj_cluster_max)."""
    return (4 * cores + 63) // 64 * 64


__all__ = ["Staging", "shadow_slice", "stageable", "team_size", "votes_bytes"]
