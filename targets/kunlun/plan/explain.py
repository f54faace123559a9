"""The error for a kernel no memory plan fits: which values hold the LM at the peak (by their
names in the kernel source, with sizes), why the dimension that dominates cannot be cut into
chunks, and the largest block along it that would fit."""
from __future__ import annotations

from compiler.errors import CompilationError, OutOfResources
from compiler.ir.ops import FOR

from ..arch import Arch
from .model import align, describe_value
from .scratch import spill_allowed


class LMBudgetError(CompilationError, OutOfResources):
    """No memory plan fits the arch's local memory (an OutOfResources, as Triton's for shared
    memory: autotuners written for Triton drop the config)."""


def _peak(buffers) -> tuple[int, list]:
    best_t, best = 0, []
    for t in sorted({b.start for b in buffers}):
        live = [b for b in buffers if b.start <= t <= b.end and b.shares is None]
        if sum(align(b.nbytes) for b in live) > sum(align(b.nbytes) for b in best):
            best_t, best = t, live
    return best_t, sorted(best, key=lambda b: -b.nbytes)


def _dominant(found, live):
    """(dimension, its extent) holding the most bytes among the live buffers, or (None, 0)."""
    dims = found.dims
    if dims is None:
        return None, 0
    weight: dict = {}
    for b in live:
        if b.value is None or id(b.value) not in dims.values:
            continue
        for a, n in enumerate(b.value.shape):
            c = dims.cls(b.value, a)
            if c is not None:
                weight[c] = weight.get(c, 0) + b.nbytes
    if not weight:
        return None, 0
    c = max(weight, key=weight.get)
    return c, max(b.value.shape[dims.axis_of(b.value, c)] for b in live
                  if b.value is not None and id(b.value) in dims.values and dims.axis_of(b.value, c) is not None)


def _largest_fit(found, live, dim, extent: int, budget: int) -> int:
    """The largest power-of-two extent of `dim` whose scaled buffers fit (0: none)."""
    dims = found.dims
    fixed = sum(align(b.nbytes) for b in live if b.value is None or id(b.value) not in dims.values
                or dims.axis_of(b.value, dim) is None)
    scaled = sum(b.nbytes for b in live if b.value is not None and id(b.value) in dims.values
                 and dims.axis_of(b.value, dim) is not None)
    size = extent // 2
    while size >= 1:
        if fixed + scaled * size // extent <= budget:
            return size
        size //= 2
    return 0


def _carried(ir) -> dict[int, tuple]:
    """block argument id -> (the loop op, its initial value), for naming carried buffers."""
    out = {}
    for op in ir.walk():
        if op.name == FOR:
            for a, init in zip(op.blocks[0].args[1:], op.operands[3:]):
                out[id(a)] = (op, init)
    return out


def _describe(b, carried) -> tuple[str, object]:
    """(how the error names buffer `b`, the source location to report it at)."""
    if b.value is not None and id(b.value) in carried:
        loop, init = carried[id(b.value)]
        name = describe_value(init).split(" (")[0]
        where = f", updated at line {loop.loc.lineno}" if loop.loc is not None else ""
        return f"{name} (loop-carried{where})", loop.loc
    return describe_value(b.value), b.value.loc if b.value is not None else None


def unplannable(kernel: str, found, arch: Arch) -> LMBudgetError:
    rec = found.rec
    _, live = _peak(rec.buffers)
    carried = _carried(found.ir)
    named = [(b, *_describe(b, carried)) for b in live]
    listing = "\n".join(f"  {what} in {b.name}: {b.nbytes} bytes" for b, what, _ in named)
    head = (f"no memory plan fits {arch.name}'s local memory: at its peak the program holds "
            f"{sum(align(b.nbytes) for b in live)} bytes of tiles in LM, over the {arch.lm_budget} bytes a core "
            f"has for them ({arch.lm_bytes_per_core} bytes of LM - {arch.lm_stack_reserve} bytes stack reserve):\n"
            f"{listing}")
    dim, extent = _dominant(found, live)
    tail = ""
    if dim is not None:
        why = found.refused.get(dim, "cutting it into smaller chunks does not lower the peak")
        size = _largest_fit(found, live, dim, extent, arch.lm_budget)
        tail = (f"\nThe axis of {extent} elements most of these share cannot be strip-mined: {why}. "
                + (f"A block of at most {size} along it would fit." if size else
                   "No block along it fits; keep fewer tiles live at once."))
    if not spill_allowed():
        tail += ("\nTILEJIT_KUNLUN_SPILL=0 is set: the plan tried no second read per role and no GM scratch, "
                 "and at most 8 cuts; unset it to let the plan move tiles through GM.")
    loc = next((where for _, _, where in named if where is not None), None)
    return LMBudgetError.at(loc, head + tail, kernel=kernel)
