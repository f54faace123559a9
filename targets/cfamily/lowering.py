"""Lowering of the Tile IR to C-family loop nests, shared by every C-like target.

Each tile value is either *inlined* (an expression its consumers evaluate per element, so a
chain of elementwise ops fuses into one loop nest) or *materialised* into a local buffer.
Loads, reductions, dots and loop-carried values are always buffers; an elementwise value is a
buffer only when recomputing it would cost (a float op used twice, broadcast, or used inside a
loop it is defined outside of). Loop nests keep the innermost loop free of loop-carried
dependencies where they can, so the C compiler vectorises them.

What differs per target lives in a `CDialect` table (types, literals, op spellings, math
functions) and in the overridable `emit_load` / `emit_store` methods.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Block, Function, Op, Value
from compiler.ir.ops import OPS

from .dialect import CDialect

_CHEAP = {"const", "arange", "program_id", "num_programs", "broadcast", "expand_dims", "trans"}


def _writes_memory(op: Op) -> bool:
    if op.name == "store":
        return True
    return any(_writes_memory(o) for b in op.blocks for o in b.ops)


def _is_cheap(op: Op) -> bool:
    if op.name in _CHEAP:
        return True
    if OPS[op.name].kind == "elementwise":
        return not op.results[0].dtype.is_floating() and not any(v.dtype.is_floating() for v in op.operands)
    return False


@dataclass
class Nest:
    """Statements of one loop nest body, with a per-element memo of evaluated values."""

    idx: tuple[str, ...]
    stmts: list[str] = field(default_factory=list)
    memo: dict = field(default_factory=dict)


class CLowering:
    """Renders one kernel's body (inside the per-program function) as C statements."""

    index_type = "int"

    def __init__(self, fn: Function, dialect: CDialect):
        self.fn = fn
        self.d = dialect
        self.names: dict[int, str] = {}
        self.buffers: set[int] = set()      # values held in local arrays
        self.counter = 0
        self.lines: list[str] = []
        self.indent = 1
        self.stack_bytes = 0
        self.static_work = 0      # elements touched by one program's loop nests, loops not counted
        self.has_loops = False    # a run-time loop makes a program's work unknown here
        self.loop_stack: list[list[Value]] = []
        self.flag_scopes: list[dict[int, str]] = [{}]
        self.known_true: set[int] = set()   # masks known to be all true in the code being emitted   # in-bounds flags visible in the current block
        self.uses: dict[int, list[Op]] = {}
        self.def_block: dict[int, int] = {}
        self.use_blocks: dict[int, set[int]] = {}
        self.position: dict[int, tuple[Block, int]] = {}
        self.op_by_id: dict[int, Op] = {}
        self._analyse(fn.body)
        self.materialized: set[int] = set()
        self.roots: dict[int, set[int]] = {}
        self._decide(fn.body)
        for p in fn.params:
            self.names[id(p.value)] = dialect.safe_name(p.name)

    # -- analysis -----------------------------------------------------------------------------
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
                out |= self.roots[id(u.results[0])]
            else:
                out.add(id(u))
        return out

    def _must_materialize(self, v: Value) -> bool:
        op = v.owner
        if op is None or v.type.is_scalar:
            return True
        if op.name == "load":
            return not self._load_fuses(v)
        if op.name in ("reduce", "dot", "for"):
            return True
        if _is_cheap(op):
            return False
        uses = self.uses.get(id(v), [])
        if any(u.name in ("broadcast", "dot") for u in uses):
            return True
        if self.use_blocks.get(id(v), set()) - {self.def_block.get(id(v))}:
            return True   # used inside a loop it is defined outside of: compute once, not per iteration
        return len(self._roots_of_uses(v)) > 1

    def _load_fuses(self, v: Value) -> bool:
        """A tile load is read inside its consumer's loop nest (no buffer, no extra pass) when it
        has one consumer nest in the same block and no op between the two writes memory.

        The consumer may be a store: each element is still loaded before it is stored, so an
        in-place op on one tensor is exact. Only a program that stores to element i of a tensor
        it loads at element j != i in the same statement would see a difference; on a GPU the
        threads owning i and j race there too, so the tile language leaves that order undefined."""
        uses = self.uses.get(id(v), [])
        if not uses or any(u.name in ("broadcast", "dot") for u in uses):
            return False
        if self.use_blocks.get(id(v), set()) - {self.def_block.get(id(v))}:
            return False
        roots = self._roots_of_uses(v)
        if len(roots) != 1:
            return False
        root = self.op_by_id.get(next(iter(roots)))
        if root is None or root.name == "for" or id(root) not in self.position:
            return False
        block, start = self.position[id(v.owner)]
        rblock, end = self.position[id(root)]
        if rblock is not block:
            return False
        return not any(_writes_memory(o) for o in block.ops[start + 1:end])

    def _materialize(self, v: Value) -> bool:
        return id(v) in self.materialized

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

    def declare_buffer(self, v: Value, name: str | None = None) -> str:
        name = name or self.name(v)
        ctype = self.d.reg_type(v.dtype)
        self.stack_bytes += v.type.numel * self.d.reg_size(v.dtype)
        self.emit(f"{self.d.local_buffer_decl(ctype, name, v.type.numel)};")
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

    def open_nest(self, shape: tuple[int, ...], simd: bool = True) -> Nest:
        n = 1
        for d in shape:
            n *= d
        self.static_work += n
        idx = tuple(f"i{k}" for k in range(len(shape)))
        for k, s in enumerate(shape):
            if simd and k == len(shape) - 1:
                self.emit(self.d.simd_pragma)
            self.emit(f"for ({self.index_type} {idx[k]} = 0; {idx[k]} < {s}; ++{idx[k]}) {{")
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
            if op is not None and op.name == "const":
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
        e = self._ev_op(op, v, idx, nest)
        if nest is not None and (OPS[op.name].kind == "elementwise" or op.name == "load") and not e.isidentifier():
            tmp = self.fresh("t")
            nest.stmts.append(f"{self.d.reg_type(v.dtype)} const {tmp} = {e};")
            e = tmp
        if nest is not None:
            nest.memo[key] = e
        return e

    def _ev_op(self, op: Op, v: Value, idx, nest) -> str:
        name = op.name
        if name == "const":
            return self.d.literal(op.attrs["value"], v.dtype)
        if name == "arange":
            start = op.attrs["start"]
            return f"({start} + {idx[0]})" if start else idx[0]
        if name == "broadcast":
            src = op.operands[0]
            sidx = tuple("0" if s == 1 and t != 1 else i for i, s, t in zip(idx, src.shape, v.shape))
            return self.ev(src, sidx if src.shape else (), nest)
        if name == "expand_dims":
            ax = op.attrs["axis"]
            return self.ev(op.operands[0], idx[:ax] + idx[ax + 1:], nest)
        if name == "trans":
            perm = op.attrs["perm"]
            sidx = [None] * len(perm)
            for i, p in enumerate(perm):
                sidx[p] = idx[i]
            return self.ev(op.operands[0], tuple(sidx), nest)
        if OPS[name].kind == "elementwise":
            args = [self.ev(o, idx, nest) for o in op.operands]
            return self.d.elementwise(op, args)
        if name == "load":   # a load fused into its consumer (see _load_fuses)
            val = self.d.load_elem(v.dtype, self.ev(op.operands[0], idx, nest))
            if len(op.operands) > 1:
                val = f"({self.ev(op.operands[1], idx, nest)} ? {val} : {self.ev(op.operands[2], idx, nest)})"
            return val
        raise CompilationError(f"internal: op '{name}' cannot be evaluated per element")

    # -- statements -----------------------------------------------------------------------------
    def lower(self) -> str:
        self.lower_block(self.fn.body)
        return "\n".join(self.lines)

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
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
            if op.name == "const":
                return  # scalar constants are spelled as literals where they are used
            expr = self._ev_op(op, v, (), None) if op.name not in ("program_id", "num_programs") \
                else self.d.program_id(op.name, op.attrs["axis"])
            self.emit(f"{self.d.reg_type(v.dtype)} const {self.name(v)} = {expr};")
            return
        if not self._materialize(v):
            return
        name = self.declare_buffer(v)
        nest = self.open_nest(v.shape)
        e = self._ev_op(op, v, nest.idx, nest)
        self.close_nest(nest, [f"{name}[{self.linear(nest.idx, v.shape)}] = {e};"])

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
        self.emit(f"int {flag} = 1;")
        nest = self.open_nest(mask.shape, simd=False)
        # the innermost loop is a vectorised AND-reduction: the check costs a few vector ops a row
        self.lines.insert(len(self.lines) - 1, "    " * (self.indent - 1) + f"#pragma omp simd reduction(&:{flag})")
        m = self.ev(mask, nest.idx, nest)
        self.close_nest(nest, [f"{flag} &= (int)({m});"])
        return flag

    def emit_load(self, op: Op) -> None:
        v = op.results[0]
        if not v.type.is_scalar and not self._materialize(v):
            return   # fused into its consumer's loop nest
        ptr, mask, other = (op.operands + [None, None])[:3]
        ld = self.d.load_elem
        if v.type.is_scalar:
            p = self.ev(ptr, (), None)
            expr = ld(v.dtype, p) if mask is None else \
                f"({self.ev(mask, (), None)} ? {ld(v.dtype, p)} : {self.ev(other, (), None)})"
            self.emit(f"{self.d.reg_type(v.dtype)} const {self.name(v)} = {expr};")
            return
        name = self.declare_buffer(v)

        def fill(masked: bool):
            nest = self.open_nest(v.shape)
            p = self.ev(ptr, nest.idx, nest)
            val = ld(v.dtype, p)
            if masked:
                val = f"({self.ev(mask, nest.idx, nest)} ? {val} : {self.ev(other, nest.idx, nest)})"
            self.close_nest(nest, [f"{name}[{self.linear(nest.idx, v.shape)}] = {val};"])

        self._masked_or_fast(mask, fill)

    def emit_store(self, op: Op) -> None:
        ptr, val = op.operands[:2]
        mask = op.operands[2] if len(op.operands) > 2 else None
        st = self.d.store_elem
        if ptr.type.is_scalar:
            s = st(val.dtype, self.ev(ptr, (), None), self.ev(val, (), None))
            self.emit(s + ";" if mask is None else f"if ({self.ev(mask, (), None)}) {s};")
            return

        def fill(masked: bool):
            nest = self.open_nest(ptr.shape)
            s = st(val.dtype, self.ev(ptr, nest.idx, nest), self.ev(val, nest.idx, nest))
            if masked:
                s = f"if ({self.ev(mask, nest.idx, nest)}) {s}"
            self.close_nest(nest, [s + ";"])

        self._masked_or_fast(mask, fill)

    def _masked_or_fast(self, mask, fill) -> None:
        if mask is None or (mask.owner is not None and mask.owner.name == "const" and mask.owner.attrs["value"]):
            fill(False)
            return
        flag = self._all_true(mask)
        self.emit(f"if ({flag}) {{")
        self.indent += 1
        self.known_true.add(id(mask))   # loads fused into the fast path drop this mask too
        fill(False)
        self.known_true.discard(id(mask))
        self.indent -= 1
        self.emit("} else {")
        self.indent += 1
        fill(True)
        self.indent -= 1
        self.emit("}")

    def op_reduce(self, op: Op) -> None:
        if op.attrs.get("order") == "pairwise":
            self._reduce_pairwise(op)
            return
        x = op.operands[0]
        r = op.results[0]
        axis, kind = op.attrs["axis"], op.attrs["kind"]
        acc_t = r.dtype
        ctype = self.d.reg_type(acc_t)
        init = self.d.reduce_identity(kind, acc_t)
        if r.type.is_scalar:
            name = self.name(r)
            self.emit(f"{ctype} {name} = {init};")
            pragma = self.d.simd_reduction_pragma(kind, acc_t, name) if len(x.shape) == 1 else None
            if pragma:
                self.emit(pragma)
            nest = self.open_nest(x.shape, simd=False)
            e = self.ev(x, nest.idx, nest)
            self.close_nest(nest, [f"{name} = {self.d.combine(kind, name, e, acc_t)};"])
            return
        name = self.declare_buffer(r)
        if axis == len(x.shape) - 1 and self.d.simd_reduction_pragma(kind, acc_t):
            # innermost axis: one accumulator per output element, vectorised as a SIMD reduction
            # (a fixed lane order for a given binary: deterministic and batch-invariant)
            nest = self.open_nest(x.shape[:-1], simd=False)
            self.emit(f"{ctype} acc = {init};")
            self.emit(self.d.simd_reduction_pragma(kind, acc_t))
            j = f"i{len(x.shape) - 1}"
            self.emit(f"for ({self.index_type} {j} = 0; {j} < {x.shape[-1]}; ++{j}) {{")
            self.indent += 1
            inner = Nest(nest.idx + (j,))
            e = self.ev(x, inner.idx, inner)
            for st in inner.stmts:
                self.emit(st)
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
        tmp = self.fresh("tree")
        self.stack_bytes += outer * P * inner * self.d.reg_size(acc_t)
        self.emit(f"{self.d.local_buffer_decl(ctype, tmp, outer * P * inner)};")
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
        name = self.fresh("m")
        self.stack_bytes += v.type.numel * self.d.reg_size(v.dtype)
        self.emit(f"{self.d.local_buffer_decl(self.d.reg_type(v.dtype), name, v.type.numel)};")
        nest = self.open_nest(v.shape)
        e = self.ev(v, nest.idx, nest)
        self.close_nest(nest, [f"{name}[{self.linear(nest.idx, v.shape)}] = {e};"])
        return name

    def op_dot(self, op: Op) -> None:
        a, b, acc = op.operands
        r = op.results[0]
        M, K = a.shape
        N = b.shape[1]
        A, B = self._as_buffer(a), self._as_buffer(b)
        if self._accumulates_in_place(op):
            # acc += dot(...) on a loop-carried accumulator: update the carried buffer itself
            C = self.name(acc)
            self.names[id(r)] = C
            self.buffers.add(id(r))
        else:
            C = self.declare_buffer(r)
            nest = self.open_nest(r.shape)
            self.close_nest(nest, [f"{C}[{self.linear(nest.idx, r.shape)}] = {self.ev(acc, nest.idx, nest)};"])
        self.emit_dot_loops(A, B, C, M, N, K, a.dtype, r.dtype)

    def _accumulates_in_place(self, op: Op) -> bool:
        """True when the dot's accumulator is a carried value of the innermost loop, read only by
        this dot, and the dot's result is yielded back into the same carried slot."""
        acc, r = op.operands[2], op.results[0]
        if not self.loop_stack or len(self.uses.get(id(acc), [])) != 1:
            return False
        args = self.loop_stack[-1]
        if acc not in args:
            return False
        slot = args.index(acc)
        yields = [u for u in self.uses.get(id(r), []) if u.name == "yield"]
        return len(yields) == 1 and yields[0].operands.index(r) == slot and yields[0].operands.count(r) == 1

    def emit_dot_loops(self, A, B, C, M, N, K, in_dt, acc_dt) -> None:
        """C[m][n] = fma(A[m][k], B[k][n], C[m][n]) for k = 0..K-1 in ascending order. Where the
        dialect has a register-blocked micro-kernel, the bulk of C runs through it; the edges run
        the same per-element order as plain loops (vectorised over n)."""
        it, rt = self.index_type, self.d.reg_type(in_dt)
        step = self.d.dot_step
        kernel = self.d.dot_microkernel if acc_dt.is_floating() and in_dt.is_floating() else None
        if kernel:
            # the largest register-block height that tiles M exactly, so no row runs the edge loop
            mr = next((m for m in self.d.dot_mr_choices if M % m == 0), self.d.dot_mr_choices[0])
            nr = self.d.dot_nr
            self.emit("{")
            self.indent += 1
            self.emit(f"constexpr {it} MR = {mr}, NR = {nr}, Mb = ({M} / MR) * MR, Nb = ({N} / NR) * NR;")
            self.emit(f"for ({it} m0 = 0; m0 < Mb; m0 += MR)")
            self.emit(f"    for ({it} n0 = 0; n0 < Nb; n0 += NR)")
            self.emit(f"        {kernel}<MR, NR>({A} + m0 * {K}, {K}, {B} + n0, {N}, {C} + m0 * {N} + n0, {N}, {K});")
            edges = (("Mb", str(M), "0", str(N)), ("0", "Mb", "Nb", str(N)))
        else:
            edges = (("0", str(M), "0", str(N)),)
        for m_lo, m_hi, n_lo, n_hi in edges:
            self.emit(f"for ({it} m = {m_lo}; m < {m_hi}; ++m)")
            self.emit(f"    for ({it} k = 0; k < {K}; ++k) {{")
            self.emit(f"        {rt} const a_mk = {A}[m * {K} + k];")
            self.emit(f"        {self.d.simd_pragma}")
            self.emit(f"        for ({it} n = {n_lo}; n < {n_hi}; ++n)")
            self.emit(f"            {C}[m * {N} + n] = {step('a_mk', f'{B}[k * {N} + n]', f'{C}[m * {N} + n]', acc_dt)};")
            self.emit("    }")
        if kernel:
            self.indent -= 1
            self.emit("}")

    def op_for(self, op: Op) -> None:
        self.has_loops = True
        body = op.blocks[0]
        lb, ub, st = (self.ev(v, (), None) for v in op.operands[:3])
        iv = body.args[0]
        ivt = self.d.reg_type(iv.dtype)
        carried = op.operands[3:]
        cnames = []
        for arg, init, res in zip(body.args[1:], carried, op.results):
            if arg.type.is_scalar:
                n = self.fresh("c")
                self.emit(f"{self.d.reg_type(arg.dtype)} {n} = {self.ev(init, (), None)};")
                self.names[id(arg)] = n
            else:
                n = self.declare_buffer(arg, self.fresh("c"))
                nest = self.open_nest(arg.shape)
                self.close_nest(nest, [f"{n}[{self.linear(nest.idx, arg.shape)}] = {self.ev(init, nest.idx, nest)};"])
            self.names[id(res)] = n
            if not res.type.is_scalar:
                self.buffers.add(id(res))
            cnames.append(n)
        trip = self.fresh("n")
        k = self.fresh("k")
        self.emit(f"const {ivt} {trip} = tj_trip_count<{ivt}>({lb}, {ub}, {st});")
        self.emit(f"for ({ivt} {k} = 0; {k} < {trip}; ++{k}) {{")
        self.indent += 1
        self.emit(f"const {ivt} {self.name(iv)} = {lb} + {k} * {st};")
        self.loop_stack.append(body.args[1:])
        self.flag_scopes.append({})
        self.lower_block(body)
        self.flag_scopes.pop()
        self.loop_stack.pop()
        self.indent -= 1
        self.emit("}")

    def op_yield(self, op: Op) -> None:
        loop_args = self.loop_stack[-1]
        arg_ids = {id(a) for a in loop_args}
        reads = [self._carried_reads(v, arg_ids) if not v.type.is_scalar else {} for v in op.operands]
        # a tile expression that reads no carried value but its own slot, element by element, is
        # written straight into that slot, if no other yielded value reads the slot
        in_place = []
        for i, (val, arg) in enumerate(zip(op.operands, loop_args)):
            ok = not val.type.is_scalar and id(val) not in self.buffers and val is not arg \
                and set(reads[i]) <= {id(arg)} and all(reads[i].values()) \
                and not any(id(arg) in r for j, r in enumerate(reads) if j != i)
            in_place.append(ok)
        for val, arg, ok in zip(op.operands, loop_args, in_place):
            if ok:
                def fill(masked: bool, val=val, arg=arg):
                    nest = self.open_nest(arg.shape)
                    e = self.ev(val, nest.idx, nest)
                    self.close_nest(nest, [f"{self.name(arg)}[{self.linear(nest.idx, arg.shape)}] = {e};"])
                self._masked_or_fast(self._fused_load_mask(val), fill)
        # phase 1: everything else that is not a stable buffer is computed into a temporary, so no
        # carried value is overwritten while another yielded value still reads it
        staged = []
        for val, arg, ok in zip(op.operands, loop_args, in_place):
            if val is arg or ok:
                staged.append(None)
            elif val.type.is_scalar:
                t = self.fresh("y")
                self.emit(f"{self.d.reg_type(val.dtype)} const {t} = {self.ev(val, (), None)};")
                staged.append(t)
            elif id(val) in self.buffers and id(val) not in arg_ids:
                staged.append(self.name(val))
            else:
                staged.append(self._as_buffer(val))
        # phase 2: copy into the carried slots
        for src, arg in zip(staged, loop_args):
            if src is None or src == self.name(arg):   # unchanged, or updated in place
                continue
            dst = self.name(arg)
            if arg.type.is_scalar:
                self.emit(f"{dst} = {src};")
            else:
                self.emit(f"{self.d.copy_buffer(dst, src, arg.type.numel, self.d.reg_type(arg.dtype))};")

    def _fused_load_mask(self, v: Value) -> Value | None:
        """The mask shared by every masked load fused into `v`'s per-element expression (at the
        same index as `v`), or None. A nest evaluating `v` can then take an unmasked fast path."""
        masks: set[int] = set()
        found = None
        stack, seen = [v], set()
        while stack:
            x = stack.pop()
            if id(x) in seen or x.type.is_scalar or id(x) in self.buffers or x.owner is None:
                continue
            seen.add(id(x))
            op = x.owner
            if op.name == "load":   # its pointer and mask expressions do not matter here
                if len(op.operands) > 1:
                    masks.add(id(op.operands[1]))
                    found = op.operands[1]
            elif OPS[op.name].kind == "elementwise":
                stack.extend(op.operands)
            elif OPS[op.name].kind == "view":
                return None   # a view changes the index: the load's mask is not at v's index
        return found if len(masks) == 1 and found.shape == v.shape else None

    def _carried_reads(self, v: Value, arg_ids: set[int]) -> dict[int, bool]:
        """Carried values that evaluating `v` per element reads: id -> read only at the same index.
        Stops at buffers already computed; any view on the way makes the access non-identity."""
        out: dict[int, bool] = {}
        stack = [(v, True)]
        seen = set()
        while stack:
            x, ident = stack.pop()
            if (id(x), ident) in seen:
                continue
            seen.add((id(x), ident))
            if id(x) in arg_ids:
                out[id(x)] = out.get(id(x), True) and ident
                continue
            if x.type.is_scalar or id(x) in self.buffers or x.owner is None:
                continue
            kind = OPS[x.owner.name].kind
            if kind in ("elementwise", "view") or x.owner.name == "load":   # fused loads read their pointers
                for o in x.owner.operands:
                    stack.append((o, ident and kind != "view"))
        return out
