"""Which dimensions to strip-mine, and by how much: the plan's search, in up to three tries.

1. The kernel with its shape-only values given one copy per use (sources.py), in at most
   MAX_STEPS cuts; with TILEJIT_KUNLUN_SPILL=0, in at most FIRST_STEPS and without the
   fallbacks below (a kernel that needs more is refused with LMBudgetError).
2. Where that does not fit, unless TILEJIT_KUNLUN_SPILL=0: also its loaded tiles one read per
   use, so that a tile in two roles (K·Kᵀ) no longer pins a dimension, in at most MAX_STEPS cuts;
   where no cut fits, this try halves the dimension that takes the most off the arena's peak per
   unit of cost.
3. Where that does not fit either (same opt-out): the tiles of loops that reduce along what they
   carry moved to GM scratch (scratch.py), then cut as in 2.

Within a try:

While the arena of the current IR does not fit the arch's LM budget, every dimension of the
kernel's tiles (dims.py) is tried at power-of-two chunk sizes from half its extent down; each
candidate is rewritten (stripmine.py), recorded by the lowering and placed (layout.py). Among the
candidates that fit, the cheapest by the per-program cost below wins (so a chunk is as large as
fits, and re-reads from GM count against a choice); when none fits, the candidate that shrinks the
arena most per unit of added cost is taken and the search goes on with another dimension. The cost uses the cost model's
assumed figures (tune/cost_model.py): a DMA setup per transfer, bytes over a core's share of the
memory bandwidth, and elements touched over the SIMD rate.
"""
from __future__ import annotations

import dataclasses

from compiler.ir import Function

from ..arch import Arch
from ..tune.cost_model import ASSUMED_CLOCK_HZ, ASSUMED_DMA_SETUP_S, FALLBACK_BANDWIDTH
from .dims import Dims
from .model import NOMINAL_TRIPS
from .passes import stripmine
from .scratch import is_scratch, spill_allowed, spill_carried, spillable_loops
from .sources import split_shared
from .stripmine import NotApplicable

FIRST_STEPS = 8    # the cuts of the search without fallbacks (TILEJIT_KUNLUN_SPILL=0)
MAX_STEPS = 24     # with them (a tile read per role has more, smaller dimensions to cut)


@dataclasses.dataclass
class Candidate:
    ir: Function
    rec: object          # plan.Record
    step: str
    halves: bool = False   # the cut halves its dimension

    def cost(self, arch: Arch) -> float:
        return program_cost(self.rec, arch)


def program_cost(rec, arch: Arch) -> float:
    """Estimated seconds of one program of a recorded IR (run-time loops at NOMINAL_TRIPS)."""
    bw = (arch.mem_bandwidth or FALLBACK_BANDWIDTH) / arch.cores
    dma = sum(d.count_per_run(NOMINAL_TRIPS) * ASSUMED_DMA_SETUP_S + d.bytes_per_run(NOMINAL_TRIPS) / bw
              for d in rec.dma)
    return dma + rec.work / (arch.fp32_lanes * ASSUMED_CLOCK_HZ)


def axis_names(dims: Dims, dim) -> str:
    """'(axis of x, y, ...)': the source names of values with an axis in `dim`."""
    from .model import source_name
    names = sorted({source_name(v) for v in dims.values.values() if dims.axis_of(v, dim) is not None} - {""})
    what = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return f"(axis of {what})" if what else ""


@dataclasses.dataclass
class Fit:
    ir: Function
    steps: list[str]
    rec: object
    dims: Dims | None = None                          # of `ir`, when the search gave up
    refused: dict = dataclasses.field(default_factory=dict)   # dimension -> why it cannot be cut
    written: object = None                            # the record of the IR as written (no cuts)


def fit(fn: Function, arch: Arch, policy: str, record) -> Fit:
    """The IR to emit, the strip-mining steps taken and its record; the record may still be over
    the budget when no rewrite helps (then `dims` and `refused` say why, for the error)."""
    written = rec = record(fn)
    if rec.total <= arch.lm_budget:
        return Fit(fn, [], rec, written=written)
    found = _cut(split_shared(fn), [], arch, policy, record, written,
                 steps_left=MAX_STEPS if spill_allowed() else FIRST_STEPS)
    if found.rec.total > arch.lm_budget and spill_allowed():   # a tile in two roles may pin a dimension
        again = _cut(split_shared(fn, reload=True), ["tiles used in two roles read once per role"], arch,
                     policy, record, written, at_peak=True)
        if (again.rec.total, again.rec.live) < (found.rec.total, found.rec.live):
            found = again
    if found.rec.total > arch.lm_budget and spill_allowed():   # the lowest tier: carried tiles in GM scratch
        shared = split_shared(fn)
        loops = spillable_loops(shared)
        if loops:
            spilled = spill_carried(shared, loops)
            names = ", ".join(p.hints["what"] for p in spilled.params if is_scratch(p))
            again = _cut(split_shared(spilled, reload=True),
                         [f"GM scratch: {names} (carried by a loop that reduces along them) kept in the core's "
                          "workspace slot, streamed through LM"], arch, policy, record, written, at_peak=True)
            if (again.rec.total, again.rec.live) < (found.rec.total, found.rec.live):
                found = again
    return found


def _cut(ir: Function, steps: list[str], arch: Arch, policy: str, record, written, at_peak: bool = False,
         steps_left: int = MAX_STEPS) -> Fit:
    """Strip-mines `ir` until it fits (or no cut helps). Where no single cut fits, the step taken
    buys the most bytes per unit of added cost: bytes live anywhere, or (`at_peak`) bytes off the
    arena's peak, which keeps a search with many small dimensions from cutting those that do not
    hold the peak (the fallback's rule; the first search keeps the plans it always made)."""
    rec = record(ir)
    refused: dict = {}
    for _ in range(steps_left):
        if rec.total <= arch.lm_budget:
            return Fit(ir, steps, rec, written=written)
        refused = {}
        cands = candidates(ir, arch, policy, record, refused)
        if not cands:
            break
        fitting = [c for c in cands if c.rec.total <= arch.lm_budget]
        if fitting:
            best = min(fitting, key=lambda c: (c.cost(arch), c.rec.total))
        else:   # no single cut fits: the one that buys the most bytes per unit of added cost
            smaller = [c for c in cands if (c.rec.total, c.rec.live) < (rec.total, rec.live)]
            if not smaller:
                break
            base = program_cost(rec, arch)
            if at_peak:   # halve the dimension that takes the most off the peak per unit of cost
                smaller = [c for c in smaller if c.halves and c.rec.total < rec.total] or smaller
            saved = (lambda c: rec.total - c.rec.total) if at_peak else (lambda c: rec.live - c.rec.live)
            best = min(smaller, key=lambda c: (max(c.cost(arch) - base, 0.0) / max(saved(c), 1), c.rec.total))
        ir, rec = best.ir, best.rec
        steps.append(best.step)
    return Fit(ir, steps, rec, Dims(ir), refused, written)


def _largest_fitting(sizes: list[int], at, budget: int) -> None:
    """Evaluates chunk sizes (descending) with few rewrites: the smallest first; when it fits, a
    binary search for the largest that fits (footprints shrink with the chunk); when it does not,
    a few larger ones, for the cost-per-byte choice of a partial step."""
    small = at(sizes[-1]) if sizes else None
    if small is None:
        for size in sizes[:2]:
            at(size)
        return
    if small.rec.total > budget:
        for size in {sizes[0], sizes[len(sizes) // 2]}:
            at(size)
        return
    lo, hi = 0, len(sizes) - 1          # sizes[hi] fits; find the smallest index that fits
    while lo < hi:
        mid = (lo + hi) // 2
        c = at(sizes[mid])
        if c is not None and c.rec.total <= budget:
            hi = mid
        else:
            lo = mid + 1


def candidates(ir: Function, arch: Arch, policy: str, record, refused: dict) -> list[Candidate]:
    """One dimension at a time, and every dimension of one extent together (the chunk loops of a
    norm's passes each have their own arange of the same BLOCK). `refused` gets, per dimension
    that cannot be cut at all, the reason."""
    dims = Dims(ir)
    classes = sorted(dims.classes().items(), key=lambda kv: (-kv[1], dims.key(kv[0])))
    groups = [[i] for i in range(len(classes))]
    for extent in sorted({e for _, e in classes}, reverse=True):
        same = [i for i, (_, e) in enumerate(classes) if e == extent]
        if len(same) > 1:
            groups.append(same)
    out = []
    for group in groups:
        extent = classes[group[0]][1]
        what = axis_names(dims, classes[group[0]][0])
        sizes = [extent >> k for k in range(1, extent.bit_length()) if extent >> k >= 1]
        seen: dict[int, Candidate | None] = {}

        def at(size: int, group=group, extent=extent, what=what, seen=seen) -> Candidate | None:
            if size not in seen:
                try:
                    new = stripmine(ir, dims, [classes[i][0] for i in group], size, policy == "strict")
                except NotApplicable as e:
                    seen[size] = None
                    if len(group) == 1:
                        refused.setdefault(classes[group[0]][0], str(e))
                else:
                    step = f"{extent} -> chunks of {size}" + (f" {what}" if what else "") + \
                        (f", in {len(group)} places" if len(group) > 1 else "")
                    seen[size] = Candidate(new, record(new), step, 2 * size == extent)
            return seen[size]

        _largest_fitting(sizes, at, arch.lm_budget)
        out += [c for c in seen.values() if c is not None]
    return out
