"""Which tile values of a kernel become local arrays and which are evaluated where they are used
(a mixin of CLowering): the uses and positions of every value, and the decision per value.

A value is *inlined* when every consumer loop nest that needs it can evaluate it per element at
no extra cost (an index, a broadcast, one cheap float op in a few nests, a load read where memory
still holds what it loaded); otherwise it is *materialised*: one loop nest fills an array and its
consumers read that. docs/architecture.md lists the rules and the measurements behind them.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Block, Op, Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import BROADCAST, CAST, DOT, LOAD, OPS, SPLIT

from .buffers import writes_memory

MAX_REREAD_NESTS = 4   # a contiguous tile loaded once is read again in up to this many consumer nests


def _recomputed(op: Op, widening: bool) -> bool:
    """Whether `op` is evaluated again in each of a few consumer nests rather than stored: one
    add/sub/mul costs less there than a store, a pass and the loads back (layer_norm's x - mean),
    and so, where the dialect says so (`widening`), does widening a 16-bit float to fp32 (exact).
    The same op, so the same bits."""
    if OPS[op.name].has("ring"):
        return True
    return (widening and op.name == CAST and op.operands[0].dtype in (D.float16, D.bfloat16)
            and op.results[0].dtype == D.float32)


def _is_cheap(op: Op) -> bool:
    """Index arithmetic, evaluated again wherever it is needed. Integer division and modulo are
    not: tens of cycles each, once per element of every nest a broadcast row index reaches (hf
    rope's row -> (batch, head, position) ran 4.8x slower than torch eager)."""
    d = OPS[op.name]
    if d.kind in ("source", "view"):
        return True
    if d.kind == "elementwise":
        return (not d.has("division") and not op.results[0].dtype.is_floating()
                and not any(v.dtype.is_floating() for v in op.operands))
    return False


class Materialization:
    def decide_materialization(self, body: Block) -> None:
        """Records every value's uses and every op's position in `body`, then which values are
        materialised (`materialized`) and which consumer ops evaluate each one (`roots`)."""
        self.uses: dict[int, list[Op]] = {}
        self.def_block: dict[int, int] = {}
        self.use_blocks: dict[int, set[int]] = {}
        self.position: dict[int, tuple[Block, int]] = {}
        self.op_by_id: dict[int, Op] = {}
        self._analyse(body)
        self.materialized: set[int] = set()
        self.roots: dict[int, set[int]] = {}
        self._decide(body)

    def _analyse(self, block: Block) -> None:
        for i, op in enumerate(block.ops):
            self.position[id(op)] = (block, i)
            self.op_by_id[id(op)] = op
            for v in op.operands:
                self.uses.setdefault(id(v), []).append(op)
                self.use_blocks.setdefault(id(v), set()).add(id(block))
            for r in op.results:
                self.def_block[id(r)] = id(block)
            for b in op.blocks:
                for a in b.args:
                    self.def_block[id(a)] = id(b)
                self._analyse(b)

    def _decide(self, block: Block) -> None:
        """Which tile values become buffers. Walks each block backwards so a value's consumers are
        decided first: an elementwise value whose uses all end up in one consumer's loop nest is
        computed once per element there (the nest memoises it) and needs no buffer."""
        for op in reversed(block.ops):
            for b in op.blocks:
                self._decide(b)
            for v in op.results:
                if self._must_materialize(v):
                    self.materialized.add(id(v))
                    self.roots[id(v)] = {id(v.owner)}
                else:
                    self.roots[id(v)] = self._roots_of_uses(v)

    def _roots_of_uses(self, v: Value) -> set[int]:
        """The ops whose loop nests evaluate `v` (through inlined elementwise/view consumers)."""
        out: set[int] = set()
        for u in self.uses.get(id(v), []):
            if u.results and id(u.results[0]) in self.roots and id(u.results[0]) not in self.materialized \
                    and OPS[u.name].kind in ("elementwise", "view") and not u.results[0].type.is_scalar:
                for r in u.results:   # (split has two)
                    out |= self.roots.get(id(r), set())
            else:
                out.add(id(u))
        return out

    def _must_materialize(self, v: Value) -> bool:
        op = v.owner
        if op is None or v.type.is_scalar:
            return True
        if op.name == LOAD:
            return not self._load_fuses(v)
        if OPS[op.name].has("whole_result"):
            return True
        if _is_cheap(op):
            return False
        if self._feeds_broadcast(v) or self._feeds_split(v):
            return True
        if self.use_blocks.get(id(v), set()) - {self.def_block.get(id(v))}:
            return True   # used inside a loop it is defined outside of: compute once, not per iteration
        roots = len(self._roots_of_uses(v))
        return roots > 1 and not (_recomputed(op, self.d.recompute_widening) and roots <= 3)

    def _feeds_broadcast(self, v: Value) -> bool:
        """Whether `v` reaches a broadcast or a dot, directly or through views (`lse[:, None]`):
        inlined, it would be evaluated once per element of the larger tile, not once per element
        of its own (a per-row log and exp recomputed for each of 128 columns made varlen
        attention's split fold cost more than its dots)."""
        for u in self.uses.get(id(v), []):
            if u.name in (BROADCAST, DOT):
                return True
            if OPS[u.name].has("same_elements") and u.results and self._feeds_broadcast(u.results[0]):
                return True
        return False

    def _feeds_split(self, v: Value) -> bool:
        """Whether `v` reaches a split, directly or through views: one nest reads its two halves at
        different indices (a tree level's x[2i] . x[2i + 1]), so an inlined `v` would be evaluated
        twice per element, and a chain of levels (tl.reduce's tree) would double that at each one."""
        for u in self.uses.get(id(v), []):
            if u.name == SPLIT:
                return True
            if OPS[u.name].has("same_elements") and u.results and self._feeds_split(u.results[0]):
                return True
        return False

    def _load_fuses(self, v: Value) -> bool:
        """A tile load is read inside its consumers' loop nests (no buffer, no extra pass) when they
        are in its block and no op between the load and the last of them writes memory.

        The last consumer may be a store: each element is still loaded before it is stored, so an
        in-place op on one tensor is exact. Only a program that stores to element i of a tensor
        it loads at element j != i in the same statement would see a difference; on a GPU the
        threads owning i and j race there too, so the tile language leaves that order undefined.

        With several consumer nests (layer_norm's row: the mean, the variance and the output) the
        tile is read again in each. Memory holds the same values each time (nothing writes it in
        between), so the bits do not change; a re-read of rows contiguous in memory costs what a
        read of the copy costs, and the copy itself (a load and a store per element, a pass of its
        own) is saved. A gather or strided tile keeps its copy."""
        uses = self.uses.get(id(v), [])
        if not uses or any(u.name in (BROADCAST, DOT) for u in uses):
            return False
        if self.use_blocks.get(id(v), set()) - {self.def_block.get(id(v))}:
            return False
        block = self.position[id(v.owner)][0]
        roots = [self.op_by_id.get(r) for r in self._roots_of_uses(v)]
        if not roots or any(r is None or OPS[r.name].has("has_region") or id(r) not in self.position
                            or self.position[id(r)][0] is not block for r in roots):
            return False
        if len(roots) > 1 and (len(roots) > MAX_REREAD_NESTS or index_step(v.owner.operands[0], len(v.shape) - 1) != 1):
            return False
        last = max(roots, key=lambda r: self.position[id(r)][1])
        return self.read_then_used_unwritten(v.owner, last)

    def read_then_used_unwritten(self, op: Op, later: Op) -> bool:
        """Whether `later` follows `op` in the same block with no op between them writing memory:
        what `op` read is still what memory holds when `later` uses it."""
        block, start = self.position[id(op)]
        lblock, end = self.position[id(later)]
        return lblock is block and not any(writes_memory(o) for o in block.ops[start + 1:end])

    def _materialize(self, v: Value) -> bool:
        return id(v) in self.materialized
