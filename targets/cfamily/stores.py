"""Stores of the C-family lowering: over the box a store's mask keeps (masks.py: mask_box), with
the masked loop for the rest, and bf16 tiles rounded in chunks by the dialect's helper. A mixin of
CLowering (lowering.py), whose `ev`, `open_nest` and `_masked_or_fast` it uses."""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Op, Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import CAST, CONST, LOAD, OPS, WHERE

from .masks import mask_box, runtime_mask

# fp32 values per call of the dialect's bf16_store: the 16 its vector rounding takes a step, few
# enough that the compiler keeps the chunk in registers (64 went through memory: 3.35 -> 3.26 us
# a bf16 layer_norm row of 4096 on one AVX2 core)
BF16_STORE_CHUNK = 16


class StoreLowering:
    def emit_store(self, op: Op) -> None:
        ptr, val = op.operands[:2]
        mask = op.operands[2] if len(op.operands) > 2 else None
        exact = self._exact_in_dtype(val)

        def st(dt, ptr_expr, val_expr):
            return self.d.store_elem(dt, ptr_expr, val_expr, exact)
        if ptr.type.is_scalar:
            s = st(val.dtype, self.address(op, self.ev(ptr, (), None), True), self.ev(val, (), None))
            self.emit(s + ";" if mask is None else f"if ({self.ev(mask, (), None)}) {s};")
            return

        def fill(masked: bool, bounds=None):
            if not masked and self._chunked_bf16_store(op, ptr, val, exact, bounds):
                return
            nest = self.open_nest(ptr.shape, bounds=bounds)
            s = st(val.dtype, self.address(op, self.ev(ptr, nest.idx, nest), True), self.ev(val, nest.idx, nest))
            if masked:
                s = f"if ({self.ev(mask, nest.idx, nest)}) {s}"
            self.close_nest(nest, [s + ";"])

        if not self._store_in_box(mask, ptr.shape, fill):
            self._masked_or_fast(mask, fill)

    def _store_in_box(self, mask: Value | None, shape: tuple[int, ...], fill) -> bool:
        """A store whose mask holds on a box of the tile (masks.mask_box: `cols < N`, `rows < M`)
        loops over that box alone, unmasked, with its bounds from tj_span: a tail tile computes its
        valid elements only, where a masked loop computes every element and stores some (a silu of
        d = 1344 in tiles of 1024 did 1.5x the work). Nothing outside the box is observable: the
        values computed in a store's loop feed that store alone. The masked loop stays for an index
        that may wrap around its type. (A whole tile's loop of constant extent as a third path
        measured no faster.) A bounds-checked build keeps the masked loop: it checks every access
        the kernel makes, an unmasked load in the lanes a store leaves out included."""
        if runtime_mask(mask) is None or mask.shape != shape or self.checks_addresses:
            return False
        terms = mask_box(mask, lambda v: id(v) in self.buffers, self.d.affine_mask_dtypes)
        if terms is None:
            return False
        bounds = [(self.fresh("lo"), self.fresh("hi")) for _ in shape]
        for (lo, hi), n in zip(bounds, shape):
            self.emit(f"int {lo} = 0, {hi} = {n};")
        spans = []
        for term in terms:
            if term[0] == "scalar":
                self.emit(f"if (!({self.ev(term[1], (), None)})) {bounds[0][1]} = 0;")
                continue
            _, k, a, b, code, sa, sb = term
            k, ty, zero = k or 0, self.d.reg_type(a.dtype), ("0",) * len(a.shape)
            spans.append(f"tj_span<{ty}>({self.ev(a, zero, None)}, {self.ev(b, zero, None)}, {code}, ({ty}){sa}, "
                         f"({ty}){sb}, {shape[k]}, &{bounds[k][0]}, &{bounds[k][1]})")
        self._fast_or_masked(mask, " && ".join(spans) or "true", lambda: fill(False, bounds), lambda: fill(True))
        return True

    def _chunked_bf16_store(self, op: Op, ptr: Value, val: Value, exact: bool, bounds=None) -> bool:
        """An unmasked bf16 tile stored contiguously along its last axis: a vectorised loop puts
        the fp32 values in a chunk (the operand of a narrowing cast, not the rounded value) and the
        dialect's bf16_store rounds and stores them, with the bits of the per-element store. Over
        the box `bounds` when given, the last chunk of a row as long as the box leaves it."""
        helper, n = self.d.bf16_store, ptr.shape[-1]
        width = next((w for w in (self.bf16_store_chunk, BF16_STORE_CHUNK) if n % w == 0), None)
        if helper is None or self.checks_addresses or val.dtype is not D.bfloat16 or width is None \
                or index_step(ptr, len(ptr.shape) - 1) != 1:
            return False
        src, cast = val, val.owner
        if cast is not None and cast.name == CAST and id(val) not in self.buffers \
                and cast.operands[0].dtype in (D.float32, D.float16, D.bfloat16):
            src = cast.operands[0]   # held in a float: rounded once, by the helper
        elif exact:
            return False   # bf16 values already (_exact_in_dtype): the per-element store moves their bits
        it = self.index_type
        outer = self.open_nest(ptr.shape[:-1], simd=False, bounds=bounds and bounds[:-1])
        start = self.fresh("at")

        in_buffer = src.dtype is D.float32 and id(src) in self.buffers   # a row-major float array

        def chunk(count: str) -> None:   # `count` (else width) elements from `start`
            if in_buffer:   # read where it lies: a copy to a chunk is a wide store read back in halves
                name = f"&{self.name(src)}[{self.linear(outer.idx + (start,), src.shape)}]"
            else:
                name = self.fresh("chunk")
                self._fill_chunk(src, outer.idx, width, name, start, count)
            dst = self.address(op, self._emit_at(ptr, outer.idx + (start,)), True)
            self.emit(f"{helper}({dst}, {name}, {count or width});")
        # whole chunks of constant width (from lo), then what is left before hi; a counted loop,
        # or the host compiler does not vectorise the chunk's
        lo, hi = bounds[-1] if bounds else ("0", str(n))
        chunks = f"({hi} - {lo}) / {width}" if bounds else str(n // width)
        self.emit(f"for ({it} c = 0; c < {chunks}; ++c) {{")
        self.indent += 1
        self.emit(f"const {it} {start} = {lo + ' + ' if bounds else ''}c * {width};")
        chunk("")
        self.indent -= 1
        self.emit("}")
        if bounds:
            self.emit(f"if ({hi} - {lo} > {width} * ({chunks})) {{")
            self.indent += 1
            self.emit(f"const {it} {start} = {lo} + {width} * ({chunks});")
            chunk(f"{hi} - {start}")
            self.indent -= 1
            self.emit("}")
        self.close_nest(outer, [])
        return True

    def _exact_in_dtype(self, v: Value) -> bool:
        """Whether `v` holds values of its narrow float dtype exactly, so that storing it takes their
        bits with no second rounding (a bf16 copy then moves bits, NaN payloads included, as a
        GPU's does): its op rounds to the dtype (a narrowing cast, arithmetic the dialect rounds),
        loads the dtype (masked lanes filled with such a value), or selects or views such values."""
        op = v.owner
        if op is None or v.dtype not in self.d.round_fn:
            return False
        if op.name == CAST:
            src = op.operands[0]
            return src.dtype is not v.dtype or self._exact_in_dtype(src)
        if op.name == CONST:
            return D.representable(op.attrs["value"], v.dtype)
        if op.name == LOAD:
            return len(op.operands) < 3 or self._exact_in_dtype(op.operands[2])
        if op.name == WHERE:
            return all(self._exact_in_dtype(x) for x in op.operands[1:])
        if OPS[op.name].has("axis_view") or OPS[op.name].has("same_elements"):
            return self._exact_in_dtype(op.operands[0])
        return op.name in self.d.rounding_ops
