"""Dimensions of a kernel's tiles: which axes of which values index the same thing.

Every axis longer than 1 of every tile value is a node; ops join nodes by their kind in the op
registry (`compiler.ir.ops.OPS[name].kind`): an elementwise op's operands and result share each
axis; views map axes (broadcast, expand_dims, trans); loads and stores join pointer, value, mask;
a reduction (an arg-reduction's value and index too) keeps all axes but the reduced one, a scan
all of them; a dot joins M, N and its contraction K; a loop
(`for`, `while`) joins each carried value with its block arguments, its yield and its result, an
`if` each result with what its branches yield. A class of joined
nodes is one *dimension* (e.g. the columns of a norm's row chunk), with one extent.

A dimension is *pinned* (never strip-mined) when an op touching it is one this analysis does not
know how to map (a view, reduction or memory op of a kind or name added later, an op with blocks
other than `for`, `while` and `if`), or when one value has two axes in it (an outer product of a vector with itself).
"""
from __future__ import annotations

from compiler.ir import Block, Function, Op, Value
from compiler.ir.ops import (BARRIER, BROADCAST, DOT, EXPAND_DIMS, FOR, IF, LOAD, OPS, REDUCE_KINDS, SCAN,
                             STORE, WHILE, YIELD)


class Dims:
    def __init__(self, fn: Function):
        self.parent: dict[tuple[int, int], tuple[int, int]] = {}
        self.values: dict[int, Value] = {}
        self.order: dict[int, int] = {}      # value id -> its place in the IR walk (a stable key)
        self._pins: list[tuple[int, int]] = []
        self.unknown: list[Op] = []          # ops pinned for being unknown to this analysis
        for p in fn.params:
            self._add(p.value)
        self._block(fn.body)
        self.pinned = {self.find(n) for n in self._pins}
        for v in self.values.values():      # two axes of one value in one class
            roots = [self.find((id(v), a)) for a, n in enumerate(v.shape) if n > 1]
            self.pinned |= {r for r in roots if roots.count(r) > 1}

    # -- union-find ------------------------------------------------------------------------------
    def _add(self, v: Value) -> None:
        self.values[id(v)] = v
        self.order.setdefault(id(v), len(self.order))
        for a, n in enumerate(v.shape):
            if n > 1:
                self.parent.setdefault((id(v), a), (id(v), a))

    def find(self, node):
        p = self.parent[node]
        while p != node:
            self.parent[node] = self.parent[p]
            node, p = p, self.parent[p]
        return node

    def _join(self, v: Value, a: int, w: Value, b: int) -> None:
        if v.shape[a] > 1 and w.shape[b] > 1 and v.shape[a] == w.shape[b]:
            ra, rb = self.find((id(v), a)), self.find((id(w), b))
            if ra != rb:
                self.parent[ra] = rb

    def _same(self, v: Value, w: Value) -> None:
        if v.shape == w.shape:
            for a in range(len(v.shape)):
                self._join(v, a, w, a)

    def _pin(self, *vals: Value) -> None:
        for v in vals:
            self._pins.extend((id(v), a) for a, n in enumerate(v.shape) if n > 1)

    # -- queries ---------------------------------------------------------------------------------
    def cls(self, v: Value, axis: int):
        """The dimension of axis `axis` of `v`, or None for an axis of extent 1."""
        return self.find((id(v), axis)) if v.shape[axis] > 1 else None

    def axis_of(self, v: Value, c) -> int | None:
        """The axis of `v` in dimension `c`, or None."""
        for a, n in enumerate(v.shape):
            if n > 1 and self.find((id(v), a)) == c:
                return a
        return None

    def key(self, node) -> tuple[int, int]:
        """A key that orders dimensions the same way in every process (object ids do not)."""
        return self.order[node[0]], node[1]

    def classes(self) -> dict:
        """dimension -> extent, for every dimension that is not pinned."""
        out = {}
        for node in self.parent:
            r = self.find(node)
            if r not in self.pinned:
                out[r] = self.values[node[0]].shape[node[1]]
        return out

    # -- the ops ---------------------------------------------------------------------------------
    def _block(self, block: Block) -> None:
        for a in block.args:
            self._add(a)
        for op in block.ops:
            for r in op.results:
                self._add(r)
            for b in op.blocks:
                self._block(b)
            self._op(op)

    def _op(self, op: Op) -> None:
        d = OPS.get(op.name)
        kind = d.kind if d is not None else None
        res = op.results
        if kind == "elementwise":
            for o in op.operands:
                self._same(res[0], o)
        elif kind == "source":
            pass
        elif d is not None and d.has("axis_view"):
            self._view(op)
        elif op.name == LOAD:
            for o in op.operands:
                self._same(res[0], o)
        elif op.name == STORE:
            for o in op.operands[1:]:
                self._same(op.operands[0], o)
        elif kind == "reduce" and op.attrs.get("kind") in REDUCE_KINDS:
            src, ax = op.operands[0], op.attrs["axis"]
            for r in res:
                for j in range(len(r.shape)):
                    self._join(r, j, src, j if j < ax else j + 1)
        elif op.name == SCAN:
            self._same(res[0], op.operands[0])
        elif op.name == DOT:
            a, b, c = op.operands
            for v in (c, res[0]):
                self._join(v, 0, a, 0)
                self._join(v, 1, b, 1)
            self._join(a, 1, b, 0)
        elif op.name == FOR:
            body = op.blocks[0]
            y = body.ops[-1]
            for init, arg, out, r in zip(op.operands[3:], body.args[1:], y.operands, res):
                for v in (arg, out, r):
                    self._same(init, v)
        elif op.name == IF:   # each result is what either branch yields
            for b in op.blocks:
                y = b.ops[-1] if b.ops and b.ops[-1].name == YIELD else None
                for r, out in zip(res, y.operands if y is not None else ()):
                    self._same(r, out)
        elif op.name == WHILE:   # a carried value: its initial value, block arguments, next value, result
            cond, body = op.blocks
            y = body.ops[-1]
            for init, ca, ba, out, r in zip(op.operands, cond.args, body.args, y.operands, res):
                for v in (ca, ba, out, r):
                    self._same(init, v)
        elif op.name in (YIELD, BARRIER):
            pass
        else:   # an op this analysis does not know: its tiles keep their shapes
            self.unknown.append(op)
            self._pin(*op.operands, *res)
            for b in op.blocks:   # and everything inside it, which may read outer tiles directly
                self._pin_block(b)

    def _pin_block(self, block: Block) -> None:
        self._pin(*block.args)
        for op in block.ops:
            self._pin(*op.operands, *op.results)
            for b in op.blocks:
                self._pin_block(b)

    def _view(self, op: Op) -> None:
        src, r = op.operands[0], op.results[0]
        if op.name == BROADCAST:
            if src.shape:
                for a in range(len(r.shape)):
                    self._join(r, a, src, a)
        elif op.name == EXPAND_DIMS:
            ax = op.attrs["axis"]
            for j in range(len(r.shape)):
                if j != ax:
                    self._join(r, j, src, j if j < ax else j - 1)
        else:   # trans
            for i, p in enumerate(op.attrs["perm"]):
                self._join(r, i, src, p)
