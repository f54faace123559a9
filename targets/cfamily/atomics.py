"""Atomics and debugging ops of the C-family lowering (a mixin of CLowering): atomic_rmw and
atomic_cas element by element (the dialect spells the read-modify-write), barrier (nothing to do:
a C program's accesses run in program order), print and assert."""
from __future__ import annotations

from compiler.ir import Op
from compiler.ir.ops import ASSERT


def c_string(text: str) -> str:
    """A C string literal of `text` (ASCII; other characters become '?')."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("?")
    return '"' + "".join(out) + '"'


class AtomicDebugLowering:
    def _per_element(self, op: Op, make) -> None:
        """Runs `make(nest_or_None, idx) -> expression` per element of the op's result, storing it."""
        r = op.results[0]
        zero = self.d.literal(0, r.dtype)
        if r.type.is_scalar:
            n = self.name(r)
            self.emit(f"{self.d.reg_type(r.dtype)} {n} = {zero};")
            self.emit(make(None, (), n))
            return
        buf = self.declare_buffer(r)
        nest = self.open_nest(r.shape, simd=False)
        self.close_nest(nest, [make(nest, nest.idx, f"{buf}[{self.linear(nest.idx, r.shape)}]")])

    def op_atomic_rmw(self, op: Op) -> None:
        ptr, val = op.operands[:2]
        mask = op.operands[2] if len(op.operands) > 2 else None

        def make(nest, idx, dst):
            addr = self.address(op, self.ev(ptr, idx, nest), True)
            call = self.d.atomic(op.attrs["kind"], val.dtype, addr, [self.ev(val, idx, nest)])
            return f"{dst} = {call};" if mask is None else f"if ({self.ev(mask, idx, nest)}) {dst} = {call};"
        self._per_element(op, make)

    def op_atomic_cas(self, op: Op) -> None:
        ptr, cmp, val = op.operands

        def make(nest, idx, dst):
            args = [self.ev(cmp, idx, nest), self.ev(val, idx, nest)]
            addr = self.address(op, self.ev(ptr, idx, nest), True)
            return f"{dst} = {self.d.atomic('cas', val.dtype, addr, args)};"
        self._per_element(op, make)

    def op_barrier(self, op: Op) -> None:
        self.emit("// tl.debug_barrier(): this program's memory accesses already run in program order")

    def op_print(self, op: Op) -> None:
        prefix, hexa = op.attrs["prefix"], op.attrs.get("hex", False)
        for k, v in enumerate(op.operands):
            label = prefix + (f" (operand {k})" if len(op.operands) > 1 else "")
            nest = self.open_nest(v.shape, simd=False)
            stmt = self.d.print_element(label, nest.idx, self.ev(v, nest.idx, nest), v.dtype, hexa)
            self.close_nest(nest, [stmt])

    def op_assert(self, op: Op) -> None:
        k = sum(1 for o in self.fn.walk() if o.name == ASSERT and o is not op and self._before(o, op))
        cond = op.operands[0]
        nest = self.open_nest(cond.shape, simd=False)
        c = self.ev(cond, nest.idx, nest)
        self.close_nest(nest, [f"if (!({c})) {self.d.assert_fail(k, op.attrs['msg'])};"])

    def _before(self, a: Op, b: Op) -> bool:
        for o in self.fn.walk():
            if o is a:
                return True
            if o is b:
                return False
        return False
