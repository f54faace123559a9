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
        x, r = self.typed(op.operands[0]).text, op.results[0]
        if not r.shape:   # the element of a single-element tile: a reduction of one element returns it
            one = f"tl.reshape({x}, [1])"
            self.assign(r, f"tl.max({one}.to(tl.int32), axis=0) != 0" if r.dtype.is_bool()
                        else f"tl.max({one}, axis=0)")
            return
        self.assign(r, f"tl.reshape({x}, {list(r.shape)})")

    def op_join(self, op: Op) -> None:
        a, b = (self.typed(v).text for v in op.operands)
        self.assign(op.results[0], f"tl.join({a}, {b})")

    def op_split(self, op: Op) -> None:
        lo, hi = (self.name(r) for r in op.results)
        self.emit(f"{lo}, {hi} = tl.split({self.typed(op.operands[0]).text})", defs=[lo, hi], pure=True)

    def op_atomic_rmw(self, op: Op) -> None:
        args = self.operands(op, tuple(range(1, len(op.operands))))
        parts = [args[0].text, args[1].text] + ([f"mask={self._mask(args[2])}"] if len(args) > 2 else [])
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
        """Triton's max/min with indices under tilejit's value rules (compiler/value_rules.py): NaN
        elements ignored, the lowest index of the extreme, an all-NaN slice NaN at index 0. Built
        from plain reductions, whose order cannot change the result: the extreme of the elements
        with NaN replaced by -inf (+inf), the lowest index holding it, and the element at that
        index (exact, -0.0 included). bf16 is compared in fp32 (exact)."""
        x = op.operands[0]
        rv, ri = op.results
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        n, ext = self.name(ri), x.shape[axis]
        xs = self.typed(x).text
        if x.dtype is D.bfloat16:
            xs = f"{xs}.to(tl.float32)"
        kshape = [1] * len(x.shape)
        kshape[axis] = ext
        self.emit(f"# {n} = arg{kind} along axis {axis}: NaN ignored, lowest index (compiler/value_rules.py)")
        self.emit(f"{n}_x = {xs}", defs=[f"{n}_x"], pure=True)
        self.emit(f"{n}_k = tl.reshape(tl.arange(0, {ext}), {kshape})", defs=[f"{n}_k"], pure=True)
        if x.dtype.is_floating():
            fill = '-float("inf")' if kind == "max" else 'float("inf")'
            self.emit(f"{n}_c = tl.where({n}_x != {n}_x, {fill}, {n}_x)", defs=[f"{n}_c"], pure=True)
            hit = f"({n}_c == {n}_m) & ({n}_x == {n}_x)"
        else:
            self.emit(f"{n}_c = {n}_x", defs=[f"{n}_c"], pure=True)
            hit = f"{n}_c == {n}_m"
        self.emit(f"{n}_m = tl.{kind}({n}_c, axis={axis}, keep_dims=True)", defs=[f"{n}_m"], pure=True)
        self.emit(f"{n}_i = tl.min(tl.where({hit}, {n}_k, {ext}), axis={axis})", defs=[f"{n}_i"], pure=True)
        self.assign(ri, f"tl.where({n}_i == {ext}, 0, {n}_i)")
        if x.dtype.is_floating():
            at = f"tl.expand_dims({n}_i, {axis})" if len(x.shape) > 1 else f"{n}_i"
            pick = f"tl.{kind}(tl.where({n}_k == {at}, {n}_c, {fill}), axis={axis})"
            val = f"tl.where({n}_i == {ext}, float('nan'), {pick})"
        else:
            val = f"tl.{kind}({n}_m, axis={axis})"   # the extreme itself: integers have one encoding
        self.assign(rv, f"({val}).to(tl.bfloat16)" if x.dtype is D.bfloat16 else val)

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
