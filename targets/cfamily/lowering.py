"""Lowering of the Tile IR to C-family loop nests, shared by every C-like target.

Each tile value is either *inlined* (an expression its consumers evaluate per element, so a
chain of elementwise ops fuses into one loop nest) or *materialised* into a local buffer;
materialize.py decides which. Loop nests keep the innermost loop free of loop-carried
dependencies where they can, so the C compiler vectorises them.

What differs per target lives in a `CDialect` table (types, literals, op spellings, math
functions) and in the overridable `emit_load` / `emit_store` methods (stores: stores.py).
"""
from __future__ import annotations

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Block, Function, Op, Value
from compiler.ir.analysis import index_step
from compiler.ir.ops import ADD, ARANGE, BROADCAST, CAST, CONST, EXPAND_DIMS, JOIN, LOAD, MUL, OPS, SPLIT, SUB, TRANS

from .atomics import AtomicDebugLowering
from .bf16_dot import Bf16DotLowering
from .buffers import LocalBuffer, Nest
from .compute import ReduceDotLowering
from .dialect import CDialect
from .in_place import InPlaceOperandLowering
from .loops import LoopLowering
from .masks import mask_terms, runtime_mask
from .materialize import Materialization
from .stores import BF16_STORE_CHUNK, StoreLowering

_INDEX_OPS = {ADD: "+", SUB: "-", MUL: "*"}   # the index arithmetic _index64 widens
# nested evaluations of per-element expressions past which `ev` evaluates operands with a stack
EV_DEPTH = 100


class CLowering(Materialization, StoreLowering, ReduceDotLowering, Bf16DotLowering, InPlaceOperandLowering,
                LoopLowering, AtomicDebugLowering):
    """Renders one kernel's body (inside the per-program function) as C statements."""

    index_type = "int"
    checks_addresses = False   # the bounds-checked lowering checks each element's address
    bf16_store_chunk = BF16_STORE_CHUNK   # a renderer building with wider vectors may set 32
    sums_follow_width = False   # set when a float sum vectorises in the vector's own lanes (compute.py)

    def __init__(self, fn: Function, dialect: CDialect, policy: str):
        self.fn = fn
        self.d = dialect
        self.policy = policy
        self.names: dict[int, str] = {}
        self.buffers: set[int] = set()      # values held in local arrays
        self.counter = 0
        self.lines: list[str] = []
        self.indent = 1
        self.local_buffers: list[LocalBuffer] = []
        self.loop_stack: list[list[Value]] = []
        self.loop_heads: list[list[int]] = []   # per run-time loop: [line before it, its indent]
        self.regions: list[tuple[str, list[Value]]] = []   # ("loop", carried args) / ("if", results)
        self.flag_scopes: list[dict[int, str]] = [{}]
        self.ev_depth = 0   # how deep `ev` is nested now
        self.known_true: set[int] = set()   # masks known to be all true in the code being emitted   # in-bounds flags visible in the current block
        self.decide_materialization(fn.body)
        self._raw_layouts: dict[int, str] | None = None   # bf16 dot operands filled raw (bf16_dot.py)
        self.in_place: dict[int, tuple[str, str]] = {}   # dot operands read in place: (pointer, ld) (in_place.py)
        self.filled_by_sum: dict[int, int] = {}   # buffer value -> the in-lanes sum that fills it (compute.py)
        # an op's index in IR order names it in what a kernel reports at run time (a status's site)
        self.op_index = {id(op): i for i, op in enumerate(fn.walk())}
        for p in fn.params:
            self.names[id(p.value)] = dialect.safe_name(p.name)

    # -- naming and output ----------------------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def name(self, v: Value) -> str:
        n = self.names.get(id(v))
        if n is None:
            n = self.names[id(v)] = self.fresh()
        return n

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    @property
    def stack_bytes(self) -> int:
        return sum(b.nbytes for b in self.local_buffers)

    def local_buffer(self, ctype: str, name: str, numel: int, value: Value | None = None) -> str:
        """Declares local array `name` (recorded in `local_buffers`) and returns the name."""
        self.local_buffers.append(LocalBuffer(name, ctype, numel, numel * self.d.ctype_size(ctype), value))
        self.emit(f"{self.d.local_buffer_decl(ctype, name, numel)};")
        return name

    def declare_buffer(self, v: Value, name: str | None = None) -> str:
        name = self.local_buffer(self.d.reg_type(v.dtype), name or self.name(v), v.type.numel, v)
        self.buffers.add(id(v))
        self.names[id(v)] = name
        return name

    # -- indexing -------------------------------------------------------------------------------
    @staticmethod
    def linear(idx: tuple[str, ...], shape: tuple[int, ...]) -> str:
        terms, stride = [], 1
        for i, s in reversed(list(zip(idx, shape))):
            if i != "0" and s != 1:
                terms.append(i if stride == 1 else f"{i} * {stride}")
            stride *= s
        return " + ".join(reversed(terms)) or "0"

    def open_nest(self, shape: tuple[int, ...], simd: bool = True, order: tuple[int, ...] | None = None,
                  bounds: list[tuple[str, str]] | None = None) -> Nest:
        """Loops over `shape`, outermost first in `order` (default: axis order, the last innermost);
        over [lo, hi) of each axis where `bounds` names them (a box, _store_in_box)."""
        idx = tuple(f"i{k}" for k in range(len(shape)))
        for pos, k in enumerate(order or range(len(shape))):
            if simd and pos == len(shape) - 1 and self.d.simd_pragma:
                self.emit(self.d.simd_pragma)
            lo, hi = bounds[k] if bounds else (0, shape[k])
            self.emit(f"for ({self.index_type} {idx[k]} = {lo}; {idx[k]} < {hi}; ++{idx[k]}) {{")
            self.indent += 1
        return Nest(idx)

    def close_nest(self, nest: Nest, body: list[str]) -> None:
        for s in nest.stmts + body:
            self.emit(s)
        for _ in nest.idx:
            self.indent -= 1
            self.emit("}")

    # -- per-element expressions --------------------------------------------------------------
    def ev(self, v: Value, idx: tuple[str, ...], nest: Nest | None) -> str:
        """C expression for element `idx` of `v`, adding temporaries to `nest`."""
        if v.type.is_scalar:
            op = v.owner
            if op is not None and op.name == CONST:
                return self.d.literal(op.attrs["value"], v.dtype)
            return self.name(v)
        if id(v) in self.buffers:
            return f"{self.name(v)}[{self.linear(idx, v.shape)}]"
        if id(v) in self.known_true:
            return "true"
        key = (id(v), idx)
        if nest is not None and key in nest.memo:
            return nest.memo[key]
        op = v.owner
        if op is None:
            raise CompilationError(f"internal: value {v} has no definition in kernel '{self.fn.name}'")
        if self.ev_depth > EV_DEPTH and nest is not None:
            self._ev_operands_first(v, idx, nest)
        self.ev_depth += 1
        try:
            e = self._ev_op(op, v, idx, nest)
        finally:
            self.ev_depth -= 1
        if nest is not None and (OPS[op.name].kind == "elementwise" or op.name == LOAD) and not e.isidentifier():
            tmp = self.fresh("t")
            nest.stmts.append(f"{self.d.reg_type(v.dtype)} const {tmp} = {e};")
            e = tmp
        if nest is not None:
            nest.memo[key] = e
            if id(v) in self.filled_by_sum:   # the sum reading it fills its buffer on the way
                nest.stmts.append(f"{self.name(v)}[{self.linear(idx, v.shape)}] = {e};")
        return e

    def _ev_operands_first(self, v: Value, idx, nest: Nest) -> None:
        """Evaluates the operands of `v` with an explicit stack, in the order the recursion of `ev`
        would (each operand fully, left to right), so that a long chain of elementwise ops (64
        exps in a row) does not nest a Python call per op past the interpreter's limit: `ev(v)`
        then finds them in the memo."""
        stack = [(o, False) for o in reversed(v.owner.operands)]
        while stack:
            w, ready = stack.pop()
            key = (id(w), idx)
            if ready or w.type.is_scalar or id(w) in self.buffers or id(w) in self.known_true \
                    or key in nest.memo or w.owner is None or OPS[w.owner.name].kind != "elementwise":
                self.ev(w, idx, nest)   # a leaf, or its operands are in the memo now
                continue
            stack.append((w, True))
            stack.extend((o, False) for o in reversed(w.owner.operands))

    def _ev_op(self, op: Op, v: Value, idx, nest) -> str:
        name = op.name
        if name == CONST:
            return self.d.literal(op.attrs["value"], v.dtype)
        if name == ARANGE:
            start = op.attrs["start"]
            return f"({start} + {idx[0]})" if start else idx[0]
        if name == BROADCAST:
            src = op.operands[0]
            sidx = tuple("0" if s == 1 and t != 1 else i for i, s, t in zip(idx, src.shape, v.shape))
            return self.ev(src, sidx if src.shape else (), nest)
        if name == EXPAND_DIMS:
            ax = op.attrs["axis"]
            return self.ev(op.operands[0], idx[:ax] + idx[ax + 1:], nest)
        if name == TRANS:
            perm = op.attrs["perm"]
            sidx = [None] * len(perm)
            for i, p in enumerate(perm):
                sidx[p] = idx[i]
            return self.ev(op.operands[0], tuple(sidx), nest)
        if OPS[name].kind == "view":   # reshape, join, split: the others are above
            return self._ev_view(op, v, idx, nest)
        if OPS[name].kind == "elementwise":
            if self.d.widen_addresses:
                wide = self._wide_address(op, v, idx, nest)
                if wide is not None:
                    return wide
            args = [self.ev(o, idx, nest) for o in op.operands]
            return self.d.elementwise(op, args)
        if name == LOAD:   # a load fused into its consumer (see _load_fuses)
            val = self.d.load_elem(v.dtype, self.address(op, self.ev(op.operands[0], idx, nest)))
            if len(op.operands) > 1:
                val = f"({self.ev(op.operands[1], idx, nest)} ? {val} : {self.ev(op.operands[2], idx, nest)})"
            return val
        raise CompilationError(f"internal: op '{name}' cannot be evaluated per element")

    def _wide_address(self, op: Op, v: Value, idx, nest) -> str | None:
        """A pointer plus an int32 tile offset, or an int32 tile widened to int64 that only feeds
        addresses, with the offset's + - * chain computed in 64 bits: the address stays affine in
        the loop index, so the host compiler can vectorise it (under -fwrapv it cannot see through a
        wrapping 32-bit sum). Only an offset that overflows int32 differs, and that addresses
        memory out of range either way."""
        if op.name == CAST and v.dtype == D.int64 and op.operands[0].dtype == D.int32 and self._feeds_addresses(v):
            return self._index64(op.operands[0], idx, nest)
        if op.name == ADD and v.dtype.is_ptr():
            p, off = op.operands if op.operands[0].dtype.is_ptr() else op.operands[::-1]
            if off.dtype == D.int32:
                wide = self._index64(off, idx, nest)
                if wide is not None:
                    return f"({self.ev(p, idx, nest)} + {wide})"
        return None

    def _feeds_addresses(self, v: Value) -> bool:
        """Whether every use of v ends in a pointer (through integer + - * and views): a widened
        value that is only ever an address offset cannot change what a program computes."""
        for u in self.uses.get(id(v), []):
            r = u.results[0] if u.results else None
            if r is None or not (r.dtype.is_ptr() or (u.name in _INDEX_OPS or OPS[u.name].kind == "view")
                                 and self._feeds_addresses(r)):
                return False
        return True

    def _index64(self, v: Value, idx, nest, top: bool = True) -> str | None:
        """int64 expression of an int32 tile built by + - * (through broadcasts and expand_dims);
        None at the top when v is not such a tile."""
        op = v.owner
        if op is not None and not v.type.is_scalar:
            if op.name == BROADCAST:
                src = op.operands[0]
                if not src.shape:
                    return None if top else f"(int64_t){self.ev(src, (), nest)}"
                sidx = tuple("0" if s == 1 and t != 1 else i for i, s, t in zip(idx, src.shape, v.shape))
                return self._index64(src, sidx, nest, top)
            if op.name == EXPAND_DIMS:
                ax = op.attrs["axis"]
                return self._index64(op.operands[0], idx[:ax] + idx[ax + 1:], nest, top)
        if v.type.is_scalar or op is None or op.name not in _INDEX_OPS or v.dtype != D.int32:
            return None if top else f"(int64_t){self.ev(v, idx, nest)}"
        a, b = (self._index64(o, idx, nest, top=False) for o in op.operands)
        return f"({a} {_INDEX_OPS[op.name]} {b})"

    def _ev_view(self, op: Op, v: Value, idx, nest) -> str:
        src = op.operands[0]
        if op.name == SPLIT:   # result k is element k of the last axis
            return self.ev(src, tuple(idx) + (str(op.results.index(v)),), nest)
        if op.name == JOIN:
            a, b = (self.ev(o, tuple(idx[:-1]), nest) for o in op.operands)
            return f"({idx[-1]} == 0 ? {a} : {b})"
        lin = self.linear(idx, v.shape)   # reshape: the same row-major position in the source
        sidx, stride = [], 1
        for n in reversed(src.shape):
            sidx.append("0" if n == 1 else f"(({lin}) / {stride} % {n})" if stride > 1 else f"(({lin}) % {n})")
            stride *= n
        return self.ev(src, tuple(reversed(sidx)), nest)

    def address(self, op: Op, expr: str, store: bool = False) -> str:
        """The address expression a load or store `op` accesses memory through (a bounds-checked
        lowering wraps it in a check)."""
        return expr

    # -- statements -----------------------------------------------------------------------------
    def lower(self) -> str:
        self.lower_block(self.fn.body)
        return "\n".join(self.lines)

    # ops this lowering refuses, with the reason (none today); every other op of the registry is
    # covered (a test checks both against compiler.ir.ops.OPS)
    REJECTED: dict[str, str] = {}

    @classmethod
    def covered_ops(cls, dialect: CDialect) -> set[str]:
        """The registry's ops this lowering renders with `dialect`: its `op_<name>` handlers, views and
        sources (evaluated per element), and the elementwise ops the dialect spells."""
        return {n for n, d in OPS.items()
                if hasattr(cls, f"op_{n}") or d.kind in ("view", "source")
                or (d.kind == "elementwise" and dialect.spells(n))}

    # control flow: the lines that open, split and close a loop body or an if; a target that
    # tracks state along the emitted code (kunlun's fences) wraps them
    def flow_open(self, kind: str, line: str) -> None:
        self.emit(line)

    def flow_next_branch(self, line: str) -> None:
        self.emit(line)

    def flow_close(self, line: str) -> None:
        self.emit(line)

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            self.lower_op(op)

    def lower_op(self, op: Op) -> None:
        """One op (a target may wrap this to note where in the program it is)."""
        handler = getattr(self, f"op_{op.name}", None)
        if handler is not None:
            handler(op)
        elif OPS[op.name].kind in ("elementwise", "view", "source"):
            self.op_elementwise(op)
        else:
            raise CompilationError(f"the C lowering does not support op '{op.name}'")

    def op_elementwise(self, op: Op) -> None:
        v = op.results[0]
        if v.type.is_scalar:
            if op.name == CONST:
                return  # scalar constants are spelled as literals where they are used
            for r in op.results:   # (split of a pair has two)
                expr = self._ev_op(op, r, (), None) if not OPS[op.name].has("grid_index") \
                    else self.d.program_id(op.name, op.attrs["axis"])
                self.emit(f"{self.d.reg_type(r.dtype)} const {self.name(r)} = {expr};")
            return
        if not self._materialize(v):
            return
        sum_op = self.sum_that_fills(v)
        if sum_op is not None:   # declared now, filled in the sum's pass (compute.py)
            self.filled_by_sum[id(v)] = id(sum_op)
            self.local_buffer(self.d.reg_type(v.dtype), self.name(v), v.type.numel, v)
            return
        mask = self._fused_load_mask(v)   # (before v is a buffer: the walk stops at buffers)
        name = self.declare_buffer(v)

        def fill(masked: bool):
            nest = self.open_nest(v.shape)
            e = self._ev_op(op, v, nest.idx, nest)
            self.close_nest(nest, [f"{name}[{self.linear(nest.idx, v.shape)}] = {e};"])
        # masked loads fused in (x.to(float32) of a masked x) get an unmasked path when in bounds:
        # a select per element keeps a 16-bit load from vectorising where there is no masked load
        self._masked_or_fast(mask, fill)

    # memory: buffers in local memory, with an unmasked fast path for tiles fully in bounds
    def op_load(self, op: Op) -> None:
        self.emit_load(op)

    def op_store(self, op: Op) -> None:
        self.emit_store(op)

    def _all_true(self, mask: Value) -> str:
        for scope in self.flag_scopes:
            if id(mask) in scope:
                return scope[id(mask)]
        flag = self.fresh("inb")
        self.flag_scopes[-1][id(mask)] = flag
        closed = self._closed_form_all_true(mask)
        if closed is not None:   # 1 or 0 when decided; -1 when an index may wrap
            self.emit(f"int {flag} = {closed};")
            self.flow_open("branch", f"if ({flag} < 0) {{")
            self.indent += 1
        self.emit(f"{'' if closed is not None else 'int '}{flag} = 1;")
        nest = self.open_nest(mask.shape, simd=False)
        # the innermost loop is a vectorised AND-reduction: the check costs a few vector ops a row
        pragma = self.d.simd_reduction_pragma("and", D.int32, flag)
        if pragma:
            self.lines.insert(len(self.lines) - 1, "    " * (self.indent - 1) + pragma)
        m = self.ev(mask, nest.idx, nest)
        self.close_nest(nest, [f"{flag} &= (int)({m});"])
        if closed is not None:
            self.indent -= 1
            self.flow_close("}")
        return flag

    def _closed_form_all_true(self, mask: Value) -> str | None:
        """A C expression deciding from the tile's corners whether `mask` is all true (targets/cfamily/masks.py)."""
        terms = mask_terms(mask, lambda v: id(v) in self.buffers, self.d.affine_mask_dtypes)
        if not terms:
            return None
        exprs = []
        for term in terms:
            if term[0] == "scalar":
                exprs.append(f"({self.ev(term[1], (), None)} ? 1 : 0)")
                continue
            _, a, b, code, consts = term
            zero = ("0",) * len(a.shape)
            ty = self.d.reg_type(a.dtype)
            exprs.append(f"tj_affine_cmp<{ty}>({self.ev(a, zero, None)}, {self.ev(b, zero, None)}, {code}, "
                         + ", ".join(f"({ty}){c}" for c in consts) + ")")
        out = exprs[0]
        for e in exprs[1:]:
            out = f"tj_tri_and({out}, {e})"
        return out

    def emit_load(self, op: Op) -> None:
        v = op.results[0]
        if not v.type.is_scalar and not self._materialize(v):
            return   # fused into its consumer's loop nest
        ptr, mask, other = (op.operands + [None, None])[:3]
        ld = self.d.load_elem
        if v.type.is_scalar:
            p = self.address(op, self.ev(ptr, (), None))
            expr = ld(v.dtype, p) if mask is None else \
                f"({self.ev(mask, (), None)} ? {ld(v.dtype, p)} : {self.ev(other, (), None)})"
            self.emit(f"{self.d.reg_type(v.dtype)} const {self.name(v)} = {expr};")
            return
        layout = self.raw_layout(v)

        def fill(masked: bool):
            name = self.name(v)
            if layout:
                self.fill_raw(op, name, layout, masked)
                return
            if not masked and self._transposed_fill(ptr, v, name):
                return
            nest = self.open_nest(v.shape, order=None if masked else self._column_order(ptr))
            p = self.address(op, self.ev(ptr, nest.idx, nest))
            val = ld(v.dtype, p)
            if masked:
                val = f"({self.ev(mask, nest.idx, nest)} ? {val} : {self.ev(other, nest.idx, nest)})"
            self.close_nest(nest, [f"{name}[{self.linear(nest.idx, v.shape)}] = {val};"])

        if not layout and self.emit_in_place_load(op, fill):
            return
        if layout:
            self.declare_raw_buffer(v)
        else:
            self.declare_buffer(v)
        self._masked_or_fast(mask, fill)

    @staticmethod
    def _column_order(ptr: Value) -> tuple[int, ...] | None:
        """(1, 0) for a 2-D pointer tile contiguous down its columns and not along its rows (a K^T
        tile of attention, the B tile of `x @ weight.t()`): the fill then walks each column with
        contiguous reads, instead of gathering every row element by element."""
        if len(ptr.shape) != 2 or ptr.shape[0] == 1 or index_step(ptr, 0) != 1 or index_step(ptr, 1) == 1:
            return None
        return (1, 0)

    def _transposed_fill(self, ptr: Value, v: Value, name: str) -> bool:
        """An unmasked fp32/fp16/bf16 tile contiguous down its columns, filled by the header's block
        transpose from one pointer per column (not where every address is checked: the
        bounds-checked lowering)."""
        helper = self.d.transposed_fill
        kind = {D.float32: 0, D.float16: 1, D.bfloat16: 2}.get(v.dtype)
        if helper is None or self.checks_addresses or kind is None or self._column_order(ptr) is None:
            return False
        rows, cols = v.shape
        table = self.pointer_table(ptr, v, "cols", cols, lambda j: ("0", j))
        self.emit(f"{helper}<{kind}>({name}, {table}, {rows}, {cols}, {self.next_tile_offset(table)});")
        return True

    def next_tile_offset(self, table: str) -> str:
        """A C expression for the byte offset from this tile (first pointer of `table`) to the one
        the enclosing loop's next iteration reads, predicted by the header's stride_ahead from the
        last iteration; "0" outside a loop."""
        if not self.loop_heads or self.d.stride_ahead is None:
            return "0"
        last, ahead = self.fresh("last"), self.fresh("ahead")
        self.declare_before_loop(f"const void* {last} = nullptr;")
        self.emit(f"const ptrdiff_t {ahead} = {self.d.stride_ahead}(&{last}, {table}[0]);")
        return ahead

    def pointer_table(self, ptr: Value, v: Value, prefix: str, count: int, at) -> str:
        """A local array of `count` pointers, entry i = ptr at tile index at(i) (one per row or column)."""
        table = self.fresh(prefix)
        self.emit(f"const {self.d.mem_type(v.dtype)}* {table}[{count}];")
        nest = self.open_nest((count,))
        self.close_nest(nest, [f"{table}[{nest.idx[0]}] = {self.ev(ptr, at(nest.idx[0]), nest)};"])
        return table

    def _masked_or_fast(self, mask, fill) -> None:
        if runtime_mask(mask) is None:
            fill(False)
            return
        self._fast_or_masked(mask, self._all_true(mask), lambda: fill(False), lambda: fill(True))

    def _fast_or_masked(self, mask: Value, cond: str, fast, masked) -> None:
        """`if (cond) fast else masked`: `mask` holds wherever the fast side runs, so loads fused
        into it drop the mask too."""
        self.flow_open("branch", f"if ({cond}) {{")
        self.indent += 1
        self.known_true.add(id(mask))
        fast()
        self.known_true.discard(id(mask))
        self.indent -= 1
        self.flow_next_branch("} else {")
        self.indent += 1
        masked()
        self.indent -= 1
        self.flow_close("}")
