"""Live ranges of LM buffers, in op times.

Ops get times in program order (pre-order: an op with blocks comes before the ops of its blocks,
and its range covers them). A buffer is live from its first reference to its last one in the
emitted code; when it is live before a block-carrying op (a loop) and referenced inside it, it
stays live to the op's end, since the next iteration reads it again. Ops with blocks are all
treated as loops here: that is exact for loops and only conservative for branches, so any
control op another part of the compiler adds is planned safely.
"""
from __future__ import annotations

from compiler.ir import Block, Function


def number_ops(fn: Function) -> tuple[dict[int, int], list[tuple[int, int]]]:
    """(op id -> time, [(start, end)] of every op with blocks)."""
    times: dict[int, int] = {}
    ranges: list[tuple[int, int]] = []
    counter = [0]

    def walk(block: Block) -> None:
        for op in block.ops:
            start = counter[0]
            times[id(op)] = start
            counter[0] += 1
            for b in op.blocks:
                walk(b)
            if op.blocks:
                ranges.append((start, counter[0] - 1))

    walk(fn.body)
    return times, ranges


def live_range(refs: list[int], ranges: list[tuple[int, int]]) -> tuple[int, int]:
    """[start, end] of a buffer referenced at `refs` (declaration included)."""
    lo, hi = min(refs), max(refs)
    changed = True
    while changed:
        changed = False
        for s, e in ranges:
            if lo <= s < hi < e:   # live into the op and referenced inside: to its end
                hi = e
                changed = True
    return lo, hi
