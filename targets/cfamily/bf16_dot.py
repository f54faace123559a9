"""bf16 dots through a header's bf16 dot instruction (a mixin of CLowering), fast policy only.

The instruction takes its operands as raw bf16 bits in two layouts (the header's Bf16Dot names
them): A row-major, so the k pair (2p, 2p + 1) of a row is one 32-bit word, and B in k pairs,
B[k][n] at (k // 2) * 2N + 2n + k % 2, so the pair of column n is one word. A bf16 tile that is
loaded only to be such a dot's A (or only its B) is filled in that layout straight from memory,
with no float tile in between; any other operand is packed from its float tile before the dot.
Both are copies of bits, so the layout never changes a result (docs/numerics.md).
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.ir import Op, Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import DOT, LOAD

ROLES = ("rows", "pairs")   # the layout of a dot's operand 0 (A) and operand 1 (B)


def raw_index(layout: str, idx: tuple[str, ...], shape: tuple[int, ...]) -> str:
    """Where element idx of a (K, N) tile sits in the pair layout, or of an (M, K) tile in rows."""
    (i, j), cols = idx, shape[1]
    if layout == "rows":
        return f"({i}) * {cols} + ({j})"
    return f"(({i}) >> 1) * {2 * cols} + 2 * ({j}) + (({i}) & 1)"


class Bf16DotLowering:
    def takes_bf16_dot(self, op: Op) -> bool:
        """Whether this dot runs through the dialect's bf16 dot: fast policy, bf16 x bf16 into fp32,
        N whole vectors of 16 columns, K whole pairs."""
        a, b = op.operands[:2]
        return (self.d.bf16_dot is not None and self.policy == "fast" and a.dtype == b.dtype == D.bfloat16
                and op.results[0].dtype == D.float32 and b.shape[1] % 16 == 0 and a.shape[1] % 2 == 0)

    def raw_layout(self, v: Value) -> str | None:
        """'rows' / 'pairs' for a bf16 tile load read only as the A / B operand of bf16 dots."""
        if self._raw_layouts is None:
            self._raw_layouts = self._find_raw_layouts()
        return self._raw_layouts.get(id(v))

    def _find_raw_layouts(self) -> dict[int, str]:
        out: dict[int, str] = {}
        if self.d.bf16_dot is None or self.policy != "fast":
            return out
        for op in self.fn.walk():
            v = op.results[0] if op.name == LOAD else None
            if v is None or v.dtype != D.bfloat16 or len(v.shape) != 2 or id(v) not in self.materialized:
                continue
            roles = set()
            for use in self.uses.get(id(v), []):
                dot = use.name == DOT and self.takes_bf16_dot(use)
                roles |= {ROLES[i] if dot and i < 2 else None for i, o in enumerate(use.operands) if o is v}
            if len(roles) == 1 and None not in roles:
                out[id(v)] = roles.pop()
        return out

    def declare_raw_buffer(self, v: Value) -> str:
        name = self.local_buffer("uint16_t", self.name(v), v.type.numel, v)
        self.buffers.add(id(v))
        self.names[id(v)] = name
        return name

    def fill_raw(self, op: Op, name: str, layout: str, masked: bool) -> None:
        """Fills a load's raw buffer: the header's vector fills where the tile is unmasked and
        contiguous along a row (B) or down a column (a K^T tile: x @ weight.t()), else element loops."""
        ptr, mask, other = (op.operands + [None, None])[:3]
        v = op.results[0]
        if not masked and not self.checks_addresses and layout == "pairs" and self._pair_fill(ptr, v, name):
            return
        nest = self.open_nest(v.shape, order=None if masked else self._column_order(ptr))
        val = f"*({self.address(op, self.ev(ptr, nest.idx, nest))})"
        if masked:
            val = f"({self.ev(mask, nest.idx, nest)} ? {val} : {self.d.to_mem(D.bfloat16, self.ev(other, nest.idx, nest))})"
        self.close_nest(nest, [f"{name}[{raw_index(layout, nest.idx, v.shape)}] = {val};"])

    def _pair_fill(self, ptr: Value, v: Value, name: str) -> bool:
        rows, cols = v.shape
        helpers = self.d.bf16_dot
        if index_step(ptr, 1) == 1:   # each row contiguous along n
            table = self.pointer_table(ptr, v, "rows", rows, lambda i: (i, "0"))
            self.emit(f"{helpers.fill_pairs}<{rows}, {cols}>({name}, {table});")
        elif self._column_order(ptr) is not None and self.d.transposed_fill:
            # each column contiguous down k: its k pairs are 32-bit words, moved by the transposing fill
            table = self.pointer_table(ptr, v, "cols", cols, lambda j: ("0", j))
            self.emit(f"{self.d.transposed_fill}<{helpers.transposed_words}>((float*){name}, {table}, "
                      f"{rows // 2}, {cols}, {self.next_tile_offset(table)});")
        else:
            return False
        return True

    def bf16_operand(self, v: Value, layout: str) -> str:
        """A dot operand in the raw layout: the load's own buffer, or a packed copy of its float tile."""
        if self.raw_layout(v) == layout:
            return self.name(v)
        src = self._as_buffer(v)
        packed = self.local_buffer("uint16_t", self.fresh("raw"), v.type.numel)
        helper = self.d.bf16_dot.pack_rows if layout == "rows" else self.d.bf16_dot.pack_pairs
        self.emit(f"{helper}<{v.shape[0]}, {v.shape[1]}>({src}, {packed});")
        return packed
