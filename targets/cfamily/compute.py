"""Reductions and dots of the C-family lowering (a mixin of CLowering): the fast policy's
vectorisable reductions, the strict policy's pairwise tree, and the dot as register-blocked
ascending-k fused multiply-adds."""
from __future__ import annotations

import math

from compiler import dtypes as D
from compiler.ir import Op, Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import ADD, BROADCAST, CONST, LOAD, REDUCE, YIELD

from .buffers import Nest, writes_memory


class ReduceDotLowering:
    def op_reduce(self, op: Op) -> None:
        if op.attrs.get("order") == "pairwise":
            self._reduce_pairwise(op)
            return
        x = op.operands[0]
        r = op.results[0]
        axis, kind = op.attrs["axis"], op.attrs["kind"]
        acc_t = r.dtype
        # masked loads read in the reduction's own nest (a row re-read, not copied) get an unmasked
        # path when in bounds, as an elementwise nest does
        mask = self._fused_load_mask(x)
        if r.type.is_scalar:
            name = self.name(r)
            pragma = self.d.simd_reduction_pragma(kind, acc_t, name) if len(x.shape) == 1 else None
            in_lanes = bool(pragma) and self._sums_in_lanes(x, kind, acc_t)
            init = self.d.reduce_identity(kind, acc_t)
            self.emit(f"float {name};" if in_lanes else f"{self.d.reg_type(acc_t)} {name} = {init};")   # (one path runs)

            def fill(masked: bool):
                if in_lanes:
                    self._reduce_in_lanes(x, (), name)
                    return
                if pragma:
                    self._emit_simd_reduction(pragma, kind, acc_t)
                nest = self.open_nest(x.shape, simd=False)
                e = self.ev(x, nest.idx, nest)
                self.close_nest(nest, [f"{name} = {self.d.combine(kind, name, e, acc_t)};"])
        else:
            name = self.declare_buffer(r)

            def fill(masked: bool):
                self._reduce_into(x, axis, kind, acc_t, name, r)
        self._masked_or_fast(mask, fill)
        for v, sum_id in list(self.filled_by_sum.items()):
            if sum_id == id(op):   # filled in both paths: read as a buffer from here on
                del self.filled_by_sum[v]
                self.buffers.add(v)

    def _emit_simd_reduction(self, pragma: str, kind: str, acc_t: D.dtype) -> None:
        """The SIMD reduction clause of a loop. Its lanes are the vector's, so a floating-point
        sum's rounding follows the vector width (`sums_follow_width`); max, min and integer
        reductions give the same value at any width."""
        if kind == "sum" and acc_t.is_floating():
            self.sums_follow_width = True
        self.emit(pragma)

    def sum_that_fills(self, v: Value) -> Op | None:
        """The sum that may fill v's buffer as it reads v, in one pass over the elements instead of
        a fill loop and a summing loop (layer_norm's widened row and its mean): a 1-D fast-policy
        sum in lanes, the next op after v's to emit code, reading v at the same index through
        inlined elementwise ops and with no masked load besides v's own (its fast path is v's).
        Each element is computed and stored as the fill loop would, so the bits do not change."""
        if len(v.shape) != 1 or not self.d.sum_vector:
            return None
        block, at = self.position[id(v.owner)]
        for op in block.ops[at + 1:]:
            if op.name == REDUCE:
                x, r = op.operands[0], op.results[0]
                reads_v = any(y is v for y in self.read_at_same_index(x, stop=v) or ())
                fits = op.attrs.get("order") != "pairwise" and r.type.is_scalar and x.shape == v.shape \
                    and self._sums_in_lanes(x, op.attrs["kind"], r.dtype) and reads_v \
                    and self._fused_load_mask(x) is self._fused_load_mask(v)
                return op if fits else None
            if op.blocks or writes_memory(op) or any(self._fills_from_tiles(t) for t in op.results):
                return None   # it emits code that might read v's buffer before it is filled
        return None

    def _fills_from_tiles(self, r: Value) -> bool:
        """Whether computing `r` where it is defined reads tiles: a materialised tile, or a scalar
        of a tile (a reduction)."""
        if r.type.is_scalar:
            return any(not o.type.is_scalar for o in r.owner.operands)
        return self._materialize(r)

    def _reduce_into(self, x: Value, axis: int, kind: str, acc_t, name: str, r: Value) -> None:
        """Tile `x` reduced along `axis` into the buffer `name` (of r's shape)."""
        ctype, init = self.d.reg_type(acc_t), self.d.reduce_identity(kind, acc_t)
        if axis == len(x.shape) - 1 and self.d.simd_reduction_pragma(kind, acc_t):
            # innermost axis: one accumulator per output element, vectorised as a SIMD reduction
            # (a fixed lane order for a given binary: deterministic and batch-invariant)
            nest = self.open_nest(x.shape[:-1], simd=False)
            if self._sums_in_lanes(x, kind, acc_t):
                self.emit("float acc;")
                self._reduce_in_lanes(x, nest.idx, "acc")
                self.close_nest(nest, [f"{name}[{self.linear(nest.idx, r.shape)}] = acc;"])
                return
            self.emit(f"{ctype} acc = {init};")
            self._emit_simd_reduction(self.d.simd_reduction_pragma(kind, acc_t), kind, acc_t)
            j = f"i{len(x.shape) - 1}"
            self.emit(f"for ({self.index_type} {j} = 0; {j} < {x.shape[-1]}; ++{j}) {{")
            self.indent += 1
            e = self._emit_at(x, nest.idx + (j,))
            self.emit(f"acc = {self.d.combine(kind, 'acc', e, acc_t)};")
            self.indent -= 1
            self.emit("}")
            self.close_nest(nest, [f"{name}[{self.linear(nest.idx, r.shape)}] = acc;"])
            return
        self.emit(f"for ({self.index_type} j = 0; j < {r.type.numel}; ++j) {name}[j] = {init};")
        # inner loop vectorises whenever the reduced axis is not the innermost one
        nest = self.open_nest(x.shape, simd=axis != len(x.shape) - 1)
        out = f"{name}[{self.linear(nest.idx[:axis] + nest.idx[axis + 1:], r.shape)}]"
        e = self.ev(x, nest.idx, nest)
        self.close_nest(nest, [f"{out} = {self.d.combine(kind, out, e, acc_t)};"])

    def _emit_at(self, x: Value, idx: tuple[str, ...]) -> str:
        """x at index `idx` inside an open loop: the statements it needs emitted, its expression returned."""
        inner = Nest(idx)
        e = self.ev(x, inner.idx, inner)
        for st in inner.stmts:
            self.emit(st)
        return e

    def _fill_chunk(self, x: Value, outer: tuple[str, ...], width: int, chunk: str, start: str = "",
                    count: str = "") -> None:
        """Inside a loop over `c`, a vectorised loop that puts `width` (or `count`) elements of x's last
        axis (at index `outer` of the others) from `start` on (default c * width) into the float
        array `chunk`."""
        it, j = self.index_type, f"i{len(x.shape) - 1}"
        self.emit(f"{self.d.local_buffer_decl('float', chunk, width)};")
        self.emit(self.d.simd_pragma)
        self.emit(f"for ({it} l = 0; l < {count or width}; ++l) {{")
        self.indent += 1
        self.emit(f"const {it} {j} = {start or f'c * {width}'} + l;")
        self.emit(f"{chunk}[l] = {self._emit_at(x, outer + (j,))};")
        self.indent -= 1
        self.emit("}")

    def _sums_in_lanes(self, x: Value, kind: str, acc_t: D.dtype) -> bool:
        lanes = self.d.sum_vector[1] if self.d.sum_vector else 0
        return bool(lanes) and kind == "sum" and acc_t == D.float32 and x.shape[-1] % lanes == 0

    def _reduce_in_lanes(self, x: Value, outer: tuple[str, ...], result: str) -> None:
        """A fast-policy fp32 sum along x's last axis (at index `outer` of the others) as L partial
        sums (the dialect's sum_vector: element i goes into partial i % L, in ascending i), folded
        pairwise at the end (w = L/2, ..., 1: partial l adds partial l + w), into `result`. The
        partials are independent vector chains, where one accumulator vector makes every add wait
        for the previous one; and the order depends on L alone, not on the ISA's vector width."""
        vtype, lanes = self.d.sum_vector
        if id(x) not in self.buffers:
            x = _without_zero_start(x)
        it, part, chunk, folded = self.index_type, self.fresh("part"), self.fresh("chunk"), self.fresh("fold")
        self.emit("{")
        self.indent += 1
        self.emit(f"{vtype} {part} = {{}};")
        self.emit(f"for ({it} c = 0; c < {x.shape[-1] // lanes}; ++c) {{")
        self.indent += 1
        half, memory = lanes // 2, self._summed_in_place(x)
        for h in range(2):   # half the partials a step: their values and they fit in registers
            start = f"c * {lanes} + {h * half}" if h else f"c * {lanes}"
            if memory is not None:   # added from where it is, not copied into a chunk first
                self.emit(f"{vtype}_add_half({part}, {memory(outer + (start,))}, {h});")
                continue
            self._fill_chunk(x, outer, half, f"{chunk}_{h}", start)
            self.emit(f"{vtype}_add_half({part}, {chunk}_{h}, {h});")
        self.indent -= 1
        self.emit("}")
        self.emit(f"{self.d.local_buffer_decl('float', folded, lanes)};")
        self.emit(f"{vtype}_store({folded}, {part});")
        w = lanes // 2
        while w:   # constant widths: each step is a few vector adds
            self.emit(f"for ({it} l = 0; l < {w}; ++l) {folded}[l] += {folded}[l + {w}];")
            w //= 2
        self.emit(f"{result} = {folded}[0];")
        self.indent -= 1
        self.emit("}")

    def _summed_in_place(self, x: Value):
        """For an fp32 tile that is memory contiguous along its last axis (a buffer, or an
        unmasked load or one whose mask is known true here), a function from a tile index to the
        C address of that element; else None. A sum adds such a tile from memory directly: as a
        chunk it is a bare copy, which the compiler routes through the stack (a fp32 layer_norm
        row of 4096: 1.95 -> 1.79 us on one AVX2 core)."""
        if x.dtype != D.float32:
            return None
        if id(x) in self.buffers:
            return lambda idx: f"({self.name(x)} + {self.linear(idx, x.shape)})"
        op = x.owner
        if op is None or op.name != LOAD or self.checks_addresses:
            return None
        if index_step(op.operands[0], len(x.shape) - 1) != 1 or \
                len(op.operands) > 1 and id(op.operands[1]) not in self.known_true:
            return None
        return lambda idx: self.address(op, self._emit_at(op.operands[0], idx))

    def _along(self, x: Value, axis: int, out_shape, head: list[str], step, tail: list[str], reverse=False) -> None:
        """One loop nest over `out_shape` (x's shape without `axis`), and in it `head`, then a loop
        over the axis (ascending, or descending with `reverse`) running `step(expr of x)`, then
        `tail`. The axis index is `ja`; `step` returns C lines."""
        nest = self.open_nest(out_shape, simd=False)
        ext = x.shape[axis]
        inner = Nest(nest.idx[:axis] + ("ja",) + nest.idx[axis:])
        e = self.ev(x, inner.idx, inner)
        loop = f"for (int ja = {ext - 1}; ja >= 0; --ja) {{" if reverse else f"for (int ja = 0; ja < {ext}; ++ja) {{"
        body = head + [loop] + ["    " + st for st in inner.stmts] + ["    " + ln for ln in step(e)] + ["}"] + tail
        if not out_shape:   # no loop around it: a scope of its own keeps `head`'s names apart
            body = ["{"] + ["    " + ln for ln in body] + ["}"]
        self.close_nest(nest, body)
        return nest.idx

    def op_scan(self, op: Op) -> None:
        """Inclusive prefix sums along the axis, one element after the other (both policies)."""
        x, r = op.operands[0], op.results[0]
        axis = op.attrs["axis"]
        ctype = self.d.reg_type(r.dtype)
        name = self.declare_buffer(r)
        out_shape = x.shape[:axis] + x.shape[axis + 1:]
        idx = tuple(f"i{k}" for k in range(len(out_shape)))
        at = f"{name}[{self.linear(idx[:axis] + ('ja',) + idx[axis:], x.shape)}]"
        init = self.d.reduce_identity("sum", r.dtype)
        self._along(x, axis, out_shape, [f"{ctype} acc = {init};"],
                    lambda e: [f"acc = {self.d.combine('sum', 'acc', e, r.dtype)};", f"{at} = acc;"], [],
                    reverse=op.attrs.get("reverse", False))

    def op_argreduce(self, op: Op) -> None:
        """(value, index) of the max/min along the axis: a scan from index 0 that takes a later
        element only when it compares strictly greater (less), so ties keep the lowest index. Floats
        start from NaN, which any non-NaN element replaces and no NaN element does: NaN elements are
        ignored, and an all-NaN slice gives NaN at index 0 (compiler/value_rules.py)."""
        x = op.operands[0]
        rv, ri = op.results
        axis, cmp = op.attrs["axis"], (">" if op.attrs["kind"] == "max" else "<")
        ctype = self.d.reg_type(x.dtype)
        if rv.type.is_scalar:
            vname, iname = self.name(rv), self.name(ri)
            self.emit(f"{ctype} {vname};")
            self.emit(f"int32_t {iname};")
            vat, iat = vname, iname
        else:
            vname, iname = self.declare_buffer(rv), self.declare_buffer(ri)
            lin = self.linear(tuple(f"i{k}" for k in range(len(rv.shape))), rv.shape)
            vat, iat = f"{vname}[{lin}]", f"{iname}[{lin}]"
        if x.dtype.is_floating():
            init = [f"{ctype} best = {self.d.literal(math.nan, x.dtype)};", "int32_t bi = 0;"]
            take = f"if (x_ {cmp} best || (best != best && x_ == x_)) {{ best = x_; bi = ja; }}"
        else:
            init = ["bool first = true;", f"{ctype} best = 0;", "int32_t bi = 0;"]
            take = f"if (first || x_ {cmp} best) {{ best = x_; bi = ja; first = false; }}"
        self._along(x, axis, rv.shape, init, lambda e: [f"{ctype} const x_ = {e};", take],
                    [f"{vat} = best;", f"{iat} = bi;"])

    def _reduce_pairwise(self, op: Op) -> None:
        """The strict tree: pad the axis to a power of two P with the identity, then combine
        element a with a + s for s = P/2, P/4, ..., 1 (the order docs/numerics.md defines)."""
        x, r = op.operands[0], op.results[0]
        axis, kind = op.attrs["axis"], op.attrs["kind"]
        acc_t = r.dtype
        ctype = self.d.reg_type(acc_t)
        ext = x.shape[axis]
        P = 1 << max(0, (ext - 1).bit_length())
        outer = 1
        for d in x.shape[:axis]:
            outer *= d
        inner = 1
        for d in x.shape[axis + 1:]:
            inner *= d
        tmp = self.local_buffer(ctype, self.fresh("tree"), outer * P * inner, x)
        padded = x.shape[:axis] + (P,) + x.shape[axis + 1:]
        if P > ext:
            init = self.d.reduce_identity(kind, acc_t)
            self.emit(f"for ({self.index_type} o = 0; o < {outer}; ++o)")
            self.emit(f"    for ({self.index_type} a = {ext}; a < {P}; ++a)")
            self.emit(f"        for ({self.index_type} i = 0; i < {inner}; ++i) {tmp}[(o * {P} + a) * {inner} + i] = {init};")
        nest = self.open_nest(x.shape)
        e = self.ev(x, nest.idx, nest)
        if x.dtype is not acc_t:
            e = self.d.cast(e, x.dtype, acc_t)
        self.close_nest(nest, [f"{tmp}[{self.linear(nest.idx, padded)}] = {e};"])
        a_at = f"{tmp}[(o * {P} + a) * {inner} + i]"
        b_at = f"{tmp}[(o * {P} + a + s) * {inner} + i]"
        self.emit(f"for ({self.index_type} s = {P // 2}; s >= 1; s >>= 1)")
        self.emit(f"    for ({self.index_type} o = 0; o < {outer}; ++o)")
        self.emit(f"        for ({self.index_type} a = 0; a < s; ++a) {{")
        if self.d.simd_pragma:
            self.emit(f"            {self.d.simd_pragma}")
        self.emit(f"            for ({self.index_type} i = 0; i < {inner}; ++i)")
        self.emit(f"                {a_at} = {self.d.combine(kind, a_at, b_at, acc_t)};")
        self.emit("        }")
        if r.type.is_scalar:
            self.emit(f"{ctype} const {self.name(r)} = {tmp}[0];")
            return
        name = self.declare_buffer(r)
        self.emit(f"for ({self.index_type} o = 0; o < {outer}; ++o)")
        self.emit(f"    for ({self.index_type} i = 0; i < {inner}; ++i) {name}[o * {inner} + i] = {tmp}[o * {P * inner} + i];")

    def _as_buffer(self, v: Value) -> str:
        """A contiguous buffer holding `v`: views and expressions are copied first."""
        if id(v) in self.buffers:
            return self.name(v)
        name = self.temporary(v)
        self.fill_together([(name, v)])
        return name

    def temporary(self, v: Value) -> str:
        """A fresh local array the size and register type of `v` (not recorded as v's buffer)."""
        return self.local_buffer(self.d.reg_type(v.dtype), self.fresh("m"), v.type.numel, v)

    def fill_together(self, fills: list[tuple[str, Value]]) -> None:
        """Writes each value into its array (`name[i] = v[i]`), the values of one shape in one loop
        nest: a subexpression they share (a Gumbel score that picks both a running maximum and its
        index) is evaluated once per element there, not once per array."""
        shapes: dict[tuple[int, ...], list[tuple[str, Value]]] = {}
        for name, v in fills:
            shapes.setdefault(v.shape, []).append((name, v))
        for shape, group in shapes.items():
            nest = self.open_nest(shape)
            body = [f"{name}[{self.linear(nest.idx, shape)}] = {self.ev(v, nest.idx, nest)};" for name, v in group]
            self.close_nest(nest, body)

    def op_dot(self, op: Op) -> None:
        a, b, acc = op.operands
        r = op.results[0]
        M, K = a.shape
        N = b.shape[1]
        bf16 = self.takes_bf16_dot(op)   # through the ISA's bf16 dot (bf16_dot.py, docs/numerics.md)
        if bf16:
            A, B = self.bf16_operand(a, "rows"), self.bf16_operand(b, "pairs")
        else:
            A = self._as_buffer(a)
            B, ldb = self.in_place.get(id(b)) or (self._as_buffer(b), str(N))
        if self._accumulates_in_place(op):
            # acc += dot(...) on a loop-carried accumulator: update the carried buffer itself
            C = self.name(acc)
            self.names[id(r)] = C
            self.buffers.add(id(r))
        else:
            C = self.declare_buffer(r)
            nest = self.open_nest(r.shape)
            self.close_nest(nest, [f"{C}[{self.linear(nest.idx, r.shape)}] = {self.ev(acc, nest.idx, nest)};"])
        if bf16:
            self.emit(f"{self.d.bf16_dot.dot}<{M}, {N}, {K}>({A}, {B}, {C});")
        else:
            self.emit_dot_loops(A, B, C, M, N, K, a.dtype, r.dtype, ldb)

    def _accumulates_in_place(self, op: Op) -> bool:
        """True when the dot's accumulator is a carried value of the innermost loop, read only by
        this dot, and the dot's result is yielded back into the same carried slot."""
        acc, r = op.operands[2], op.results[0]
        if not self.loop_stack or self.regions[-1][0] != "loop" or len(self.uses.get(id(acc), [])) != 1:
            return False
        args = self.loop_stack[-1]
        if acc not in args:
            return False
        slot = args.index(acc)
        yields = [u for u in self.uses.get(id(r), []) if u.name == YIELD]
        return len(yields) == 1 and yields[0].operands.index(r) == slot and yields[0].operands.count(r) == 1

    def emit_dot_loops(self, A, B, C, M, N, K, in_dt, acc_dt, ldb=None) -> None:
        """C[m][n] = fma(A[m][k], B[k * ldb + n], C[m][n]) for k = 0..K-1 in ascending order (ldb:
        N, or the row spacing of a B read in place). Where the
        dialect has a register-blocked micro-kernel, the bulk of C runs through it; the edges run
        the same per-element order as plain loops (vectorised over n)."""
        it, rt = self.index_type, self.d.reg_type(in_dt)
        step, ldb = self.d.dot_step, ldb or str(N)
        # the micro-kernel is fp32's (fp64 dots run the plain loops)
        kernel = self.d.dot_microkernel if acc_dt is D.float32 and in_dt.is_floating() and in_dt is not D.float64 \
            else None
        if kernel:
            # the register block's height comes from the header (tj_dot_mr: what the ISA's vector
            # registers hold); rows left below the last full block run as one shorter block
            self.emit("{")
            self.indent += 1
            self.emit(f"constexpr {it} NR = {self.d.dot_nr.format(M=M, N=N)}, MR = tj_dot_mr(NR), Mb = ({M} / MR) * MR, "
                      f"Nb = ({N} / NR) * NR, MT = {M} - Mb;")
            self.emit(f"for ({it} m0 = 0; m0 < Mb; m0 += MR)")
            self.emit(f"    for ({it} n0 = 0; n0 < Nb; n0 += NR)")
            self.emit(f"        {kernel}<MR, NR>({A} + m0 * {K}, {K}, {B} + n0, {ldb}, {C} + m0 * {N} + n0, {N}, {K});")
            self.emit("if (MT > 0)")
            self.emit(f"    for ({it} n0 = 0; n0 < Nb; n0 += NR)")
            self.emit(f"        {kernel}<(MT > 0 ? MT : 1), NR>({A} + Mb * {K}, {K}, {B} + n0, {ldb}, {C} + Mb * {N} + n0, "
                      f"{N}, {K});")
            edges = (("0", str(M), "Nb", str(N)),)
        else:
            edges = (("0", str(M), "0", str(N)),)
        for m_lo, m_hi, n_lo, n_hi in edges:
            self.emit(f"for ({it} m = {m_lo}; m < {m_hi}; ++m)")
            self.emit(f"    for ({it} k = 0; k < {K}; ++k) {{")
            self.emit(f"        {rt} const a_mk = {A}[m * {K} + k];")
            if self.d.simd_pragma:
                self.emit(f"        {self.d.simd_pragma}")
            self.emit(f"        for ({it} n = {n_lo}; n < {n_hi}; ++n)")
            self.emit(f"            {C}[m * {N} + n] = {step('a_mk', f'{B}[k * {ldb} + n]', f'{C}[m * {N} + n]', acc_dt)};")
            self.emit("    }")
        if kernel:
            self.indent -= 1
            self.emit("}")


def _positive_zero(v: Value) -> bool:
    op = v.owner
    if op is not None and op.name == BROADCAST:
        op = op.operands[0].owner
    return op is not None and op.name == CONST and op.attrs["value"] == 0 \
        and math.copysign(1.0, op.attrs["value"]) > 0


def _without_zero_start(x: Value) -> Value:
    """y for x = +0.0 + y (layer_norm's `zeros + x`, which turns -0.0 into +0.0 for a sum of any
    order). Summed in lanes, the add changes no bit: each partial starts at +0.0, so it is never
    -0.0, and p + (-0.0) == p + (+0.0) for every p that is not -0.0 (NaNs included)."""
    op = x.owner
    if op is None or op.name != ADD or x.dtype != D.float32:
        return x
    a, b = op.operands
    return b if _positive_zero(a) else a if _positive_zero(b) else x
