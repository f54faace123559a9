"""Rendering of the gpu target's structured and special ops (a mixin of renderer._Emitter): if and
while (the condition block rendered before the loop and again at the end of the body), reshape,
join and split, arg-reductions and scans (strict: the C targets' order), atomics, the barrier,
device_print and device_assert."""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Op

from .spelling import tl_dtype


class _Flag:
    """A name a yield assigns that is no IR value (a while loop's condition)."""

    def __init__(self, name):
        self.name = name


class StructuredOps:
    def op_reshape(self, op: Op) -> None:
        self.assign(op.results[0], f"tl.reshape({self.typed(op.operands[0]).text}, {list(op.results[0].shape)})")

    def op_join(self, op: Op) -> None:
        a, b = (self.typed(v).text for v in op.operands)
        self.assign(op.results[0], f"tl.join({a}, {b})")

    def op_split(self, op: Op) -> None:
        lo, hi = (self.name(r) for r in op.results)
        self.emit(f"{lo}, {hi} = tl.split({self.typed(op.operands[0]).text})", defs=[lo, hi], pure=True)

    def op_atomic_rmw(self, op: Op) -> None:
        args = self.operands(op, tuple(range(1, len(op.operands))))
        parts = [args[0].text, args[1].text] + ([f"mask={args[2].text}"] if len(args) > 2 else [])
        self.assign(op.results[0], f"tl.atomic_{op.attrs['kind']}({', '.join(parts)})", pure=False)

    def op_atomic_cas(self, op: Op) -> None:
        args = self.operands(op, (1, 2))
        self.assign(op.results[0], f"tl.atomic_cas({', '.join(a.text for a in args)})", pure=False)

    def op_barrier(self, op: Op) -> None:
        self.emit("tl.debug_barrier()")

    def op_print(self, op: Op) -> None:
        args = "".join(f", {self.typed(v).text}" for v in op.operands)
        hexa = ", hex=True" if op.attrs.get("hex") else ""
        self.emit(f"tl.device_print({op.attrs['prefix']!r}{args}{hexa})")

    def op_assert(self, op: Op) -> None:
        self.emit(f"tl.device_assert({self.typed(op.operands[0]).text}, {op.attrs['msg']!r})")

    def op_argreduce(self, op: Op) -> None:
        """Triton's max/min with indices, ties to the lowest index (bf16 compared in fp32: exact)."""
        x = op.operands[0]
        rv, ri = op.results
        xs = self.typed(x).text
        if x.dtype is D.bfloat16:
            xs = f"{xs}.to(tl.float32)"
        v, i = self.name(rv), self.name(ri)
        self.emit(f"{v}_x, {i} = tl.{op.attrs['kind']}({xs}, axis={op.attrs['axis']}, return_indices=True, "
                  "return_indices_tie_break_left=True)", defs=[f"{v}_x", i], pure=True)
        self.assign(rv, f"{v}_x.to(tl.bfloat16)" if x.dtype is D.bfloat16 else f"{v}_x")

    def op_scan(self, op: Op) -> None:
        """fast: tl.cumsum. strict: the C targets' order, one element after the other: element i
        is taken out with a masked sum whose other terms are the exact identity (-0.0 / 0)."""
        x, r = op.operands[0], op.results[0]
        axis, rev = op.attrs["axis"], bool(op.attrs.get("reverse"))
        xs = self.typed(x).text
        if not self.strict:
            self.assign(r, f"tl.cumsum({xs}, axis={axis}{', reverse=True' if rev else ''})")
            return
        n, ext = self.name(r), x.shape[axis]
        zero = "-0.0" if r.dtype.is_floating() else "0"
        kshape = [1] * len(x.shape)
        kshape[axis] = ext
        others = [d for k, d in enumerate(x.shape) if k != axis]
        self.emit(f"# {n} = prefix sums along axis {axis} in index order (strict)")
        self.emit(f"{n}_t = {xs}")
        self.emit(f"{n}_k = tl.reshape(tl.arange(0, {ext}), {kshape})")
        self.emit(f"{n}_acc = tl.full({others}, 0, {tl_dtype(r.dtype)})")
        self.emit(f"{n} = tl.full({list(x.shape)}, 0, {tl_dtype(r.dtype)})", defs=[n])
        self.emit(f"for {n}_i in range({ext - 1 if rev else 0}, {-1 if rev else ext}, {-1 if rev else 1}):")
        self.indent += 1
        self.emit(f"{n}_acc = {n}_acc + tl.sum(tl.where({n}_k == {n}_i, {n}_t, {zero}), axis={axis})")
        self.emit(f"{n} = tl.where({n}_k == {n}_i, tl.expand_dims({n}_acc, {axis}), {n})")
        self.indent -= 1

    def _sub_block(self, block, targets) -> None:
        self.indent += 1
        n_before = len(self.lines)
        self.loops.append(targets)
        self.block(block)
        self.loops.pop()
        if len(self.lines) == n_before:
            self.emit("pass")
        self.indent -= 1

    def op_if(self, op: Op) -> None:
        self.emit(f"if {self.name(op.operands[0])}:")
        self._sub_block(op.blocks[0], op.results)
        self.emit("else:")
        self._sub_block(op.blocks[1], op.results)

    def op_while(self, op: Op) -> None:
        """The condition block is rendered before the loop and again at the end of the body,
        into one name the `while` tests (Triton carries it like every name the body assigns)."""
        cond, body = op.blocks
        for c, init in zip(cond.args, op.operands):
            self.emit(f"{self.name(c)} = {self.typed(init).text}")
        flag = f"{self.name(op.results[0]) if op.results else 'w' + str(len(self.lines))}_cond"
        self.loops.append([_Flag(flag)])
        self.block(cond)
        self.emit(f"while {flag}:")
        self.indent += 1
        for a, c in zip(body.args, cond.args):
            self.emit(f"{self.name(a)} = {self.name(c)}", defs=[self.name(a)], pure=True)
        self.loops.append(cond.args)
        self.block(body)
        self.loops.pop()
        self.block(cond)
        self.loops.pop()
        self.indent -= 1
        for c, res in zip(cond.args, op.results):
            self.assign(res, self.name(c))
