"""Which dimensions to strip-mine, and by how much: the plan's search.

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
from .sources import split_shared
from .stripmine import NotApplicable

MAX_STEPS = 8


@dataclasses.dataclass
class Candidate:
    ir: Function
    rec: object          # plan.Record
    step: str

    def cost(self, arch: Arch) -> float:
        return program_cost(self.rec, arch)


def program_cost(rec, arch: Arch) -> float:
    """Estimated seconds of one program of a recorded IR (run-time loops at NOMINAL_TRIPS)."""
    bw = (arch.mem_bandwidth or FALLBACK_BANDWIDTH) / arch.cores
    dma = sum(d.count_per_run(NOMINAL_TRIPS) * ASSUMED_DMA_SETUP_S + d.bytes_per_run(NOMINAL_TRIPS) / bw
              for d in rec.dma)
    return dma + rec.work / (arch.fp32_lanes * ASSUMED_CLOCK_HZ)


def describe_dim(fn: Function, dims: Dims, dim, extent: int, size: int) -> str:
    from .model import source_name
    names = sorted({source_name(v) for v in dims.values.values() if dims.axis_of(v, dim) is not None} - {""})
    what = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return f"{extent} -> chunks of {size}" + (f" (axis of {what})" if what else "")


def fit(fn: Function, arch: Arch, policy: str, record) -> tuple[Function, list[str], object]:
    """(the IR to emit, the strip-mining steps taken, its record); the record may still be over the
    budget when no rewrite helps (the caller raises the error)."""
    ir, steps = fn, []
    rec = record(ir)
    for _ in range(MAX_STEPS):
        if rec.total <= arch.lm_budget:
            break
        cands = candidates(ir, arch, policy, record)
        if not cands:
            break
        fitting = [c for c in cands if c.rec.total <= arch.lm_budget]
        if fitting:
            best = min(fitting, key=lambda c: (c.cost(arch), c.rec.total))
        else:   # no single cut fits: the one that buys the most bytes per unit of added cost
            smaller = [c for c in cands if c.rec.total < rec.total]
            if not smaller:
                break
            base = program_cost(rec, arch)
            best = min(smaller, key=lambda c: (max(c.cost(arch) - base, 0.0) / (rec.total - c.rec.total),
                                               c.rec.total))
        ir, rec = best.ir, best.rec
        steps.append(best.step)
    return ir, steps, rec


def candidates(ir: Function, arch: Arch, policy: str, record) -> list[Candidate]:
    ir = split_shared(ir)
    dims = Dims(ir)
    out = []
    for dim, extent in sorted(dims.classes().items(), key=lambda kv: -kv[1]):
        size = extent // 2
        while size >= 1:
            try:
                new = stripmine(ir, dims, dim, size, policy == "strict")
            except NotApplicable:
                break
            rec = record(new)
            out.append(Candidate(new, rec, describe_dim(ir, dims, dim, extent, size)))
            if rec.total <= arch.lm_budget:
                break    # the largest chunk that fits; smaller ones only cost more
            size //= 2
    return out
