"""Strip-mining: one dimension of a kernel's tiles cut into chunks that fit LM, as an IR rewrite.

`stripmine(fn, dims, dim, size, strict)` (passes.py) returns a new Function in which every tile with an axis in
`dim` (extent E) is computed `size` elements at a time, inside loops over the E/size chunks. It
works region by region (a block), by what each op does along the dimension:

- *parallel* ops (elementwise, views, sources, loads, stores, dots and reductions along other
  axes) run per chunk: their chunk is computed where it is needed, from its operands' chunks;
- a *reduction* along the dimension, or a *dot* contracting it, is carried across the chunks of
  one pass (trees.py; the dot accumulates chunk after chunk, in ascending k), and so are a *scan*
  (`tl.cumsum`, with its running sum; a reverse one walks the chunks from the last) and an
  *arg-reduction* (with its value and index; carried.py);
- a value needed after such a reduction (softmax: x - max(x)) is recomputed in a later pass from
  its sources: its loads re-read GM. Passes are numbered by those dependencies; ops that use
  nothing of the dimension run between passes;
- a loop whose carried tiles have the axis and whose body is parallel along it is interchanged:
  it runs once per chunk, inside the pass (a norm's carried accumulator, a matmul's K loop); so
  does a run-time `if` whose branches yield chunked tiles and are parallel along the axis;
- a loop that carries nothing of the dimension but uses it inside is a region of its own, and so
  is each branch of a run-time `if` (a kernel's early `return` puts the rest of it in one) and
  each block of a `while` that neither carries nor yields a chunked tile.

Anything else touching the dimension (an op the dimension analysis pinned, a loop carrying the axis
whose body reduces along it) makes the rewrite refuse with `NotApplicable`, and the search tries
another dimension. Memory order is kept: stores stay in program order, and a load is re-read in a
later pass only where no store to the same tensor parameter comes between (distinct parameters
are assumed not to overlap, as in every tile program).
"""
from __future__ import annotations

from compiler.ir import Block, Function, Op, Value
from compiler.ir.ops import ARGREDUCE, DOT, FOR, IF, OPS, REDUCE, SCAN, STORE, WHILE, YIELD

from .dims import Dims


class NotApplicable(Exception):
    """This dimension cannot be strip-mined here (the reason is the message)."""


class Ctx:
    """One rewrite: the dimensions cut (several independent ones of one extent may be cut together,
    e.g. the aranges of a norm's passes), the chunk size and the policy."""

    def __init__(self, fn: Function, dims: Dims, dim, size: int, strict: bool):
        self.fn, self.dims, self.size, self.strict = fn, dims, size, strict
        self.dim = frozenset(dim) if isinstance(dim, (set, frozenset, list)) else frozenset([dim])
        extents = {dims.classes()[d] for d in self.dim}
        if len(extents) != 1:
            raise NotApplicable("dimensions cut together must have one extent")
        self.extent = extents.pop()
        if self.extent % size or size & (size - 1):
            raise NotApplicable(f"chunk {size} does not divide extent {self.extent} in powers of two")
        self.n = self.extent // size
        self.stored = stored_bases(fn.body)
        self._touch: dict[int, bool] = {}
        self._axis: dict[int, int | None] = {}

    def axis(self, v: Value) -> int | None:
        got = self._axis.get(id(v), -1)
        if got == -1:
            axes = [a for a, n in enumerate(v.shape) if n > 1 and self.dims.find((id(v), a)) in self.dim]
            if len(axes) > 1:
                raise NotApplicable("a tile has two axes among the dimensions cut together")
            got = self._axis[id(v)] = axes[0] if axes else None
        return got

    def has(self, v: Value) -> bool:
        return self.axis(v) is not None

    def touches(self, op: Op) -> bool:
        t = self._touch.get(id(op))
        if t is None:
            t = any(self.has(v) for v in (*op.operands, *op.results)) or \
                any(self.touches(o) for b in op.blocks for o in b.ops) or \
                any(self.has(a) for b in op.blocks for a in b.args)
            self._touch[id(op)] = t
        return t

    def parallel_body(self, block: Block) -> bool:
        """Whether every op of `block` (nested ones too) runs chunk by chunk on its own."""
        for op in block.ops:
            role = self.role(op) if self.touches(op) else "free"
            if role in ("red", "con", "scan", "arg", "inner"):
                return False
            if role == "free" and _has_store(op):
                return False   # would run once per chunk
            if op.blocks and role == "loop" and not all(self.parallel_body(b) for b in op.blocks):
                return False
        return True

    def role(self, op: Op) -> str:
        """What `op` (which touches the dimension) does along it."""
        if op.name == FOR:
            if any(self.has(v) for v in op.operands[3:]):
                if not self.parallel_body(op.blocks[0]):
                    raise NotApplicable("a loop carries a chunked tile but reduces along it inside")
                return "loop"
            return "inner"
        if op.name == IF:
            if not any(self.has(v) for v in op.results):
                return "inner"   # cut inside each branch
            if any(r.dtype.is_ptr() and not self.has(r) for r in op.results):
                raise NotApplicable("a run-time 'if' yields chunked tiles and a pointer without the axis")
            if not all(self.parallel_body(b) for b in op.blocks):
                raise NotApplicable("a run-time 'if' yields a chunked tile but reduces along it inside")
            return "loop"   # run once per chunk, as a loop carrying the axis is
        if op.name == WHILE:
            if any(self.has(v) for v in op.operands):
                raise NotApplicable("a run-time 'while' carries a chunked tile")
            return "inner"
        if op.blocks:
            raise NotApplicable(f"op '{op.name}' has blocks this rewrite does not know")
        if op.name == REDUCE and self.axis(op.operands[0]) == op.attrs["axis"]:
            return "red"
        if op.name == SCAN and self.axis(op.operands[0]) == op.attrs["axis"]:
            return "scan"
        if op.name == ARGREDUCE and self.axis(op.operands[0]) == op.attrs["axis"]:
            return "arg"
        if op.name == DOT and self.axis(op.operands[0]) == 1:
            return "con"
        if op.name == STORE:
            return "store"
        if op.name == YIELD:
            return "free"
        return "par"


def _has_store(op: Op) -> bool:
    return op.name == STORE or any(_has_store(o) for b in op.blocks for o in b.ops)


def stored_bases(block: Block) -> set[int]:
    """Ids of the pointer roots `block` writes through (stores and atomics)."""
    out = set()
    for op in block.ops:
        if OPS[op.name].has("writes_global"):
            out |= bases(op.operands[0])
        for b in op.blocks:
            out |= stored_bases(b)
    return out


def bases(v: Value) -> set[int]:
    """Ids of the pointer parameters (or other roots) a pointer value is derived from."""
    out, stack, seen = set(), [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if x.owner is None or not any(o.dtype.is_ptr() for o in x.owner.operands):
            out.add(id(x))
            continue
        stack.extend(o for o in x.owner.operands if o.dtype.is_ptr())
    return out
