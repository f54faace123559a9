"""The Kunlun memory plan: the stage between the Tile IR and the `.xpu` text that decides where
every tile lives and how it moves, parameterised by the arch table.

    plan_memory(fn, arch, policy) -> MemoryPlan

1. the IR stages (each an IR-to-IR rewrite inside this target): 64-bit integers that only feed
   addresses are narrowed to 32 bits (`narrow.py`), and tiles whose buffers do not fit the arch's
   LM are strip-mined into power-of-two chunks (`stripmine.py`, chosen by `search.py`);
2. the lowering, in record mode, reports the LM buffers that IR needs and where it references them;
3. live ranges (`liveness.py`) and the arena layout (`layout.py`: reuse by liveness, elementwise
   results written over dying operands);
4. where the arena still fits with them, loads fetched one loop iteration ahead into a second
   slot (`prefetch.py`: the lowering records the IR again with them);
5. the result (`model.py`): GM tensors, LM buffers with offsets, SM buffers, DMA sites, the steps.

The renderer emits exactly this plan; `LMBudgetError` is raised only when no plan fits.
"""
from __future__ import annotations

import dataclasses

from compiler.ir import Function, verify, walk_block
from compiler.ir.ops import ADD, STORE

from ..arch import Arch
from .layout import place
from .liveness import live_range
from .model import DMA, GMTensor, LMBuffer, MemoryPlan, SMBuffer
from .induction import scalarize
from .narrow import narrow
from .prefetch import ahead
from .explain import unplannable
from .scratch import is_scratch, scratch_layout
from .search import fit


@dataclasses.dataclass
class Record:
    """What the lowering needs for one IR: its LM buffers (placed), DMA sites, arena bytes, work."""

    buffers: list[LMBuffer]
    dma: list[DMA]
    total: int
    work: float
    sm: list[SMBuffer] = dataclasses.field(default_factory=list)
    prefetched: dict[int, int] = dataclasses.field(default_factory=dict)   # load id -> second slot bytes

    @property
    def live(self) -> int:
        """Bytes of every buffer, a tie-breaker of progress where the arena's peak did not move."""
        return sum(b.nbytes for b in self.buffers)


def record(ir: Function, dialect, policy: str, prefetch: bool = False, skip: frozenset = frozenset()) -> Record:
    """Runs the lowering in record mode (double-buffering loads with `prefetch`, but those in
    `skip`) and places the buffers it asks for."""
    from ..codegen.lowering import KunlunLowering  # local: the lowering imports this package
    low = KunlunLowering(ir, dialect, policy, prefetch=prefetch, skip=skip)
    low.lower()
    for b in low.requests:
        b.start, b.end = live_range(low.refs[b.name], low.ranges)
    sm = [SMBuffer(f"slot of {name}", nbytes, f"a staged tile at offset {at} of each team's slot")
          for name, at, nbytes in low.sm_slots]
    return Record(low.requests, low.dma_sites, place(low.requests), low.work, sm, low.prefetched)


def gm_tensors(fn: Function) -> list[GMTensor]:
    written = set()
    for op in walk_block(fn.body):
        if op.name == STORE:
            written |= _bases(op.operands[0])
    return [GMTensor(p.name, p.type.dtype.element_ty.name, id(p.value) in written)
            for p in fn.params if p.type.dtype.is_ptr() and not is_scratch(p)]


def _bases(v) -> set[int]:
    """Ids of the pointer parameters a pointer value is derived from."""
    out, stack, seen = set(), [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if x.owner is None:
            if x.dtype.is_ptr():
                out.add(id(x))
            continue
        stack.extend(o for o in x.owner.operands if o.dtype.is_ptr() or x.owner.name != ADD)
    return out


def plan_memory(fn: Function, arch: Arch, policy: str, dialect) -> MemoryPlan:
    found = fit(scalarize(narrow(fn)), arch, policy, lambda f: record(f, dialect, policy))
    ir, rec = found.ir, found.rec
    if rec.total > arch.lm_budget:
        raise unplannable(fn.name, found, arch)
    if ir is not fn:
        verify(ir)   # the plan's rewrites keep the IR's invariants (a failure is a compiler bug)
    doubled = _double_buffered(ir, dialect, policy, arch.lm_budget)
    skip, rec = doubled if doubled is not None else (frozenset(), rec)
    return MemoryPlan(ir=ir, arch=arch.name, budget=arch.lm_budget, gm=gm_tensors(ir), lm=rec.buffers, sm=rec.sm,
                      dma=rec.dma, steps=found.steps, lm_bytes=rec.total, written_dma=found.written.dma,
                      prefetch=doubled is not None, skip=skip, scratch=scratch_layout(ir), cores=arch.cores)


def _double_buffered(ir: Function, dialect, policy: str, budget: int) -> tuple[frozenset, Record] | None:
    """The loads to leave single-buffered so that the others' second slots fit the arena (the
    largest slots given up first; double buffering never costs a cut of its own) and the record
    with the rest double-buffered, or None when no load is."""
    if not ahead(ir, set()):   # no loop load qualifies, staged or not: spare a lowering pass
        return None
    skip: frozenset = frozenset()
    while True:
        rec = record(ir, dialect, policy, prefetch=True, skip=skip)
        if not rec.prefetched:
            return None
        if rec.total <= budget:
            return skip, rec
        skip |= {max(rec.prefetched, key=rec.prefetched.get)}


__all__ = ["MemoryPlan", "plan_memory", "record"]
