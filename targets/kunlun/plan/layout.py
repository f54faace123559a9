"""Places LM buffers in one per-core arena: buffers whose live ranges do not overlap share bytes,
and an elementwise result (or a store's staging buffer) is written over an operand buffer that
dies at that op and is read only at the element being written."""
from __future__ import annotations

from .model import LMBuffer, align


def place(buffers: list[LMBuffer]) -> int:
    """Sets every buffer's offset (and `shares`); returns the arena size in bytes."""
    placed: list[LMBuffer] = []
    by_name = {b.name: b for b in buffers}
    taken: set[str] = set()            # buffers already overwritten in place by another
    slot_end: dict[str, int] = {}      # a buffer's bytes stay in use to the end of whoever reuses them
    for b in sorted(buffers, key=lambda b: (b.start, b.index)):
        host = _in_place_host(b, by_name, taken, slot_end)
        if host is not None:
            b.offset, b.shares = host.offset, host.name
            taken.add(host.name)
            root = _root(host, by_name)
            slot_end[root.name] = max(slot_end.get(root.name, root.end), b.end)
            placed.append(b)
            continue
        busy = sorted((o.offset, o.offset + align(o.nbytes)) for o in placed
                      if _end(o, by_name, slot_end) >= b.start and o.shares is None)
        b.offset = _first_fit(busy, align(b.nbytes))
        placed.append(b)
    return max((b.offset + align(b.nbytes) for b in buffers), default=0)


def _root(b: LMBuffer, by_name) -> LMBuffer:
    while b.shares is not None:
        b = by_name[b.shares]
    return b


def _end(b: LMBuffer, by_name, slot_end) -> int:
    return slot_end.get(b.name, b.end)


def _in_place_host(b: LMBuffer, by_name, taken, slot_end) -> LMBuffer | None:
    for name in b.inplace:
        h = by_name.get(name)
        if h is None or h.name in taken or align(h.nbytes) < align(b.nbytes):
            continue
        if _end(_root(h, by_name), by_name, slot_end) == b.start == h.end:
            return h
    return None


def _first_fit(busy: list[tuple[int, int]], size: int) -> int:
    off = 0
    for lo, hi in busy:
        if off + size <= lo:
            break
        off = max(off, hi)
    return off
