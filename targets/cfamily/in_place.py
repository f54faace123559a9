"""A dot's B operand read where it lies in memory (a mixin of CLowering), when copying it would
cost more than the dot reads it.

A dot with few rows of A reads each element of B once or a few times; copying the B tile into
a local buffer first (a load and a store per element) then costs about as much as the dot. A
fp32 tile loaded only to be such a dot's B, whose rows are contiguous (unit step along its
columns), is read in place when at run time the tile is in bounds and its rows are equally
spaced (`rows_strided`, the header's check over one pointer per row): the micro-kernel then
takes the first row and that spacing as its leading dimension. Otherwise the tile is copied as
before. The dot reads the same values in the same order, so no bit changes.
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Op, Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import DOT

MAX_ROWS_OF_A = 16   # above this the copy is amortised over enough row blocks of A to pay


class InPlaceOperandLowering:
    def _in_place_dot(self, op: Op) -> Op | None:
        """The dot that reads load `op`'s tile in place, or None (then the tile is a buffer)."""
        v, ptr = op.results[0], op.operands[0]
        if (self.d.rows_strided is None or self.d.dot_microkernel is None or self.checks_addresses
                or v.dtype != D.float32 or len(v.shape) != 2 or v.shape[0] < 2 or index_step(ptr, 1) != 1):
            return None
        uses = self.uses.get(id(v), [])
        if len(uses) != 1 or uses[0].name != DOT or [o is v for o in uses[0].operands] != [False, True, False]:
            return None
        dot = uses[0]
        if dot.operands[0].shape[0] > MAX_ROWS_OF_A or dot.results[0].dtype != D.float32:
            return None
        return dot if self.read_then_used_unwritten(op, dot) else None

    def emit_in_place_load(self, op: Op, fill_copy) -> bool:
        """Emits load `op` for a dot that reads it in place where it can; False if it cannot.
        `fill_copy(masked)` copies the tile into its buffer (the path taken otherwise)."""
        if self._in_place_dot(op) is None:
            return False
        v, ptr = op.results[0], op.operands[0]
        mask = op.operands[1] if len(op.operands) > 1 else None
        rows, cols = v.shape
        name = self.declare_buffer(v)   # the copy, for edge tiles and rows not equally spaced
        table = self.pointer_table(ptr, v, "rows", rows, lambda i: (i, "0"))
        where, ld = f"{name}_at", f"{name}_ld"
        self.emit(f"const float* {where} = {name};")
        self.emit(f"int {ld} = {cols};")
        flag = "1" if mask is None else self._all_true(mask)
        self.flow_open("branch", f"if ({flag} && {self.d.rows_strided}({table}, {rows}, &{ld})) {{")
        self.emit(f"    {where} = {table}[0];")
        self.flow_next_branch("} else {")
        self.indent += 1
        self._masked_or_fast(mask, fill_copy)
        self.indent -= 1
        self.flow_close("}")
        self.in_place[id(v)] = (where, ld)
        return True
