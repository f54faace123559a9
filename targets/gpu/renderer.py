"""Renders a kernel's Tile IR -- after the passes and the numerics lowering -- as Triton source:
one `@triton.jit` function per kernel, from the jinja2 skeleton in templates/ and the op table
below. Every IR value `%N` becomes the Python name `vN` (parameters keep their names), so the
source reads side by side with `python -m compiler.inspect ... --stage ir-opt`.

What the two numerics policies render (docs/gpu.md has the reasoning):

- fast: Triton's native math (`tl.exp`, `/`, `tl.sqrt`, `tl.sum`, ...), `tl.dot` with IEEE fp32
  operands (tf32 only when the target asks for it), fp contraction left to Triton.
- strict: the IR already holds the software math (compiler/strict.py); `/` and `sqrt` become
  `tl.div_rn` / `tl.sqrt_rn`, float max/min are written as the cpu target's `a > b ? a : b`,
  `reduce {order=pairwise}` becomes the explicit tree of docs/numerics.md (reshape/permute/split
  halves, combine x[a] with x[a + s] for s = P/2 .. 1), and `dot` becomes one fused multiply-add
  per k in ascending k per output element. The build turns fp contraction off.

In both policies fp16/bf16 arithmetic is computed in fp32 and rounded to nearest even once per
op (the cpu target's semantics: exact IEEE fp16/bf16 results), narrowing casts round to nearest
even explicitly, float -> int casts saturate (NaN -> 0) as on cpu, and integer `//` / `%`
truncate toward zero with the cpu target's results for a zero or -1 divisor.
"""
from __future__ import annotations

import math
import os

import jinja2

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Function, Op, Value
from compiler.ir.ops import LOAD, STORE

from .structured import StructuredOps, _Flag
from .spelling import (BF16_EXACT, BINARY, COVERED, EXACT_VIA_F32, MAX_NUMEL, NARROW_FLOATS, REJECTED, ROUNDING,  # noqa: F401
                       STRICT_FLOAT, TERNARY, UNARY, _bshape, _is_pow2, param_names, tl_dtype,
                       triton_signature_type)

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                          keep_trailing_newline=True, undefined=jinja2.StrictUndefined)

class _Arg:
    """An operand as rendered: text, and whether it is an untyped Python literal."""

    __slots__ = ("text", "literal", "dtype", "shape")

    def __init__(self, text, literal, dtype, shape):
        self.text, self.literal, self.dtype, self.shape = text, literal, dtype, shape


class _Line:
    __slots__ = ("indent", "text", "defs", "uses", "pure")

    def __init__(self, indent, text, defs=(), uses=(), pure=False):
        self.indent, self.text, self.defs, self.uses, self.pure = indent, text, set(defs), set(uses), pure


class TritonRenderer:
    """IR -> Triton source. `tf32` lets fast-policy fp32 dots use tf32 tensor cores.
    `interpret` works around two gaps of Triton 3.9's interpreter in the fast policy (the strict
    source is the same for every mode): bf16 `tl.dot` operands are widened to fp32 (its numpy
    matmul would multiply the raw uint16 bits), and fp32 -> bf16 casts use the explicit
    round-to-nearest-even bit sequence (its own cast truncates)."""

    def __init__(self, tf32: bool = False, interpret: bool = False):
        self.tf32 = tf32
        self.interpret = interpret

    def render(self, fn: Function, policy: str) -> str:
        return _Emitter(fn, policy, self.tf32, self.interpret).render()


class _Emitter(StructuredOps):
    def __init__(self, fn: Function, policy: str, tf32: bool, interpret: bool = False):
        self.fn = fn
        self.strict = policy == "strict"
        self.interpret = interpret
        # fp32 -> bf16 as explicit integer round-to-nearest-even (the cpu target's tj_f2bf)
        self.explicit_bf16 = self.strict or interpret
        self.policy = policy
        self.tf32 = tf32
        self.names: dict[int, str] = {}
        self.literals: dict[int, str] = {}      # values that are constants: their Python literal
        self.bsrc: dict[int, Value] = {}        # broadcast results: their source value
        self.lines: list[_Line] = []
        self.indent = 0
        self.notes: list[str] = []
        self.loops: list[list[Value]] = []     # carried values of the enclosing for ops
        # scalars that Triton's interpreter holds as Python ints (a loop's induction variable and
        # integer arithmetic on it): a cast first makes them a tensor
        self.pyints: set[int] = set()

    # -- names -------------------------------------------------------------------------------------
    def _assign_names(self) -> list[str]:
        params = param_names(self.fn)
        for p, name in zip(self.fn.params, params):
            self.names[id(p.value)] = name
        counter = [0]

        def define(v):
            self.names[id(v)] = f"v{counter[0]}"
            counter[0] += 1

        def walk(block):   # the printer's numbering: for = iv, carried, results, then the body
            for op in block.ops:   # while = both blocks' args, results, blocks; if = results, blocks
                for a in (a for blk in op.blocks for a in blk.args):
                    define(a)
                for r in op.results:
                    define(r)
                for blk in op.blocks:
                    walk(blk)
        walk(self.fn.body)
        return params

    def name(self, v) -> str:
        return v.name if isinstance(v, _Flag) else self.names[id(v)]

    def err(self, op: Op, msg: str) -> CompilationError:
        return CompilationError.at(op.loc, f"gpu target: {msg}", kernel=self.fn.name)

    # -- operands --------------------------------------------------------------------------------
    def typed(self, v: Value) -> _Arg:
        """A value as a typed Triton tensor of its own shape (constants become tl.full)."""
        lit = self.literals.get(id(v))
        if lit is not None:
            return _Arg(f"tl.full({list(v.shape)}, {lit}, {tl_dtype(v.dtype)})", False, v.dtype, v.shape)
        return _Arg(self.name(v), False, v.dtype, v.shape)

    def _root(self, v: Value) -> Value:
        while id(v) in self.bsrc:
            v = self.bsrc[id(v)]
        return v

    def operands(self, op: Op, elide: tuple[int, ...]) -> list[_Arg]:
        """Operands with broadcasts elided (and constants inlined as literals) where Triton's own
        implicit broadcasting and weak scalar typing give the same value."""
        vals = list(op.operands)
        out_shape = op.results[0].shape if op.results else vals[0].shape
        cur = [(v, False) for v in vals]     # (value, as literal?)

        def shapes(c):
            return [() if lit else v.shape for v, lit in c]
        for i in elide:
            v = vals[i]
            root = self._root(v)
            for cand, as_lit in ((root, id(root) in self.literals), (v, id(v) in self.literals)):
                trial = list(cur)
                trial[i] = (cand, as_lit)
                if _bshape(shapes(trial)) == tuple(out_shape) or (op.name in (LOAD, STORE)
                                                                  and _bshape(shapes(trial)) is not None):
                    cur = trial
                    break
        # a literal needs a typed partner of its dtype (weak typing); otherwise render it typed
        args = []
        for i, (v, lit) in enumerate(cur):
            if lit:
                partner = any(not l2 and v2.dtype is v.dtype for j, (v2, l2) in enumerate(cur) if j != i)
                if partner or op.name in (LOAD, STORE):
                    args.append(_Arg(self.literals[id(v)], True, v.dtype, ()))
                    continue
                args.append(self.typed(v))
                continue
            args.append(self.typed(v))
        return args

    # -- emission ---------------------------------------------------------------------------------
    def emit(self, text: str, defs=(), uses=(), pure=False) -> None:
        self.lines.append(_Line(self.indent, text, defs, uses, pure))

    def assign(self, r: Value, expr: str, pure: bool = True) -> None:
        self.emit(f"{self.name(r)} = {expr}", defs=[self.name(r)], pure=pure)

    def render(self) -> str:
        params = self._assign_names()
        for v in self._all_values():
            if v.shape:
                if any(not _is_pow2(s) for s in v.shape):
                    raise self.err(v.owner, self._pow2_message(v))
                if v.type.numel > MAX_NUMEL:
                    raise self.err(v.owner, f"a {v.type} tile exceeds Triton's {MAX_NUMEL} elements")
        self.block(self.fn.body)
        body = self._dce()
        if not body:
            body = ["pass"]
        return _ENV.get_template("kernel.py.j2").render(name=self.fn.name, params=params, body=body,
                                                        policy=self.policy, notes=self.notes)

    def _pow2_message(self, v: Value) -> str:
        """Names the constexpr argument(s) whose value is the offending dimension, and the fix."""
        bad = [d for d in v.shape if not _is_pow2(d)]
        args = [(n, int(r)) for n, r in self.fn.specialization.get("args", ())
                if r.lstrip("-").isdigit() and int(r) in bad]
        culprit = (" from argument " + ", ".join(f"{n}={x}" for n, x in args)) if args else ""
        fix = (", ".join(f"{n}={1 << (x - 1).bit_length()}" for n, x in args) if args
               else "power-of-two BLOCK sizes")
        return (f"Triton needs power-of-two tile dimensions, but this kernel has a {v.type} tile{culprit} "
                f"(%{self.name(v)[1:]} in the IR). Use {fix}, with masked loads and stores for the extra elements")

    def _all_values(self):
        for op in self.fn.walk():
            yield from op.results

    def _dce(self) -> list[str]:
        import re  # noqa: PLC0415
        ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
        for ln in self.lines:
            ln.uses = set(ident.findall(ln.text.split("=", 1)[1] if ln.pure and "=" in ln.text else ln.text))
        live: set[str] = set()
        keep = [False] * len(self.lines)
        changed = True
        while changed:   # loops make later lines use earlier ones and back: iterate to a fixpoint
            changed = False
            for i in range(len(self.lines) - 1, -1, -1):
                ln = self.lines[i]
                if keep[i]:
                    continue
                if not ln.pure or ln.defs & live:
                    keep[i] = True
                    live |= ln.uses
                    changed = True
        return ["    " * ln.indent + ln.text for ln, k in zip(self.lines, keep) if k]

    def block(self, block) -> None:
        for op in block.ops:
            if op.name not in COVERED:
                raise self.err(op, REJECTED.get(op.name, f"op '{op.name}' has no Triton rendering"))
            getattr(self, "op_" + op.name, self.op_elementwise)(op)

    # -- sources and views ---------------------------------------------------------------------------
    def literal(self, value, dt: D.dtype) -> str:
        if dt.is_floating():
            v = float(value)
            if math.isnan(v):
                return 'float("nan")'
            if math.isinf(v):
                return 'float("inf")' if v > 0 else '-float("inf")'
            return repr(v) if not (v < 0 or (v == 0 and math.copysign(1, v) < 0)) else f"({v!r})"
        if dt.is_bool():
            return "True" if value else "False"
        v = int(value)
        return str(v) if v >= 0 else f"({v})"

    def op_const(self, op: Op) -> None:
        r = op.results[0]
        self.literals[id(r)] = self.literal(op.attrs["value"], r.dtype)
        self.assign(r, self.typed(r).text)

    def op_arange(self, op: Op) -> None:
        self.assign(op.results[0], f"tl.arange({op.attrs['start']}, {op.attrs['end']})")

    def op_program_id(self, op: Op) -> None:
        self.assign(op.results[0], f"tl.program_id({op.attrs['axis']})")

    def op_num_programs(self, op: Op) -> None:
        self.assign(op.results[0], f"tl.num_programs({op.attrs['axis']})")

    def op_broadcast(self, op: Op) -> None:
        x, r = op.operands[0], op.results[0]
        self.bsrc[id(r)] = x
        if id(x) in self.literals:
            self.literals[id(r)] = self.literals[id(x)]
            self.assign(r, self.typed(r).text)
            return
        src = self.name(x)
        if id(x) in self.pyints and x.shape != r.shape:   # the interpreter's Python int: a tensor first
            src = f"tl.full([], {src}, {tl_dtype(x.dtype)})"
        self.assign(r, f"tl.broadcast_to({src}, {list(r.shape)})" if x.shape != r.shape else src)

    def op_expand_dims(self, op: Op) -> None:
        x, r = op.operands[0], op.results[0]
        self.assign(r, f"tl.expand_dims({self.typed(x).text}, {op.attrs['axis']})")

    def op_trans(self, op: Op) -> None:
        x, r = op.operands[0], op.results[0]
        perm = list(op.attrs["perm"])
        if perm == list(range(len(perm))):
            self.assign(r, self.typed(x).text)
        elif len(perm) == 2:
            self.assign(r, f"tl.trans({self.typed(x).text})")
        else:
            self.assign(r, f"tl.permute({self.typed(x).text}, {perm})")

    # -- elementwise --------------------------------------------------------------------------------
    def op_elementwise(self, op: Op) -> None:
        name, r = op.name, op.results[0]
        dt = r.dtype
        src = op.operands[0].dtype
        args = self.operands(op, tuple(range(len(op.operands))))
        if name in ("shl", "shr") and src.is_bool():   # by 0: unchanged; by 1 (>= the width): 0
            self.assign(r, f"{self.typed(op.operands[0]).text} & ~{self.typed(op.operands[1]).text}")
            return
        if name in ("floordiv", "mod") and src.is_int():
            self.assign(r, self._int_div(name, args, src))
            return
        if name in ("shl", "shr"):
            self.assign(r, self._shift(name, args, src))
            return
        if name == "neg" and src.is_bool():
            self.assign(r, args[0].text)
            return
        if not r.shape and name in BINARY and src.is_int() and all(
                id(v) in self.pyints or id(v) in self.literals for v in op.operands):
            self.pyints.add(id(r))
        table = BINARY if name in BINARY else UNARY if name in UNARY else TERNARY
        fmt = table[name]
        if self.strict and src.is_floating() and name in STRICT_FLOAT \
                and (src is not D.float64 or name in ("max", "min")):   # fp64's / and sqrt round correctly
            fmt = STRICT_FLOAT[name]
        wide = (dt in NARROW_FLOATS and name in ROUNDING) or (src is D.bfloat16 and name in BF16_EXACT) \
            or (src in NARROW_FLOATS and name in EXACT_VIA_F32)
        if wide:
            texts = [a.text if a.literal or a.dtype is not src else f"{a.text}.to(tl.float32)" for a in args]
            expr = fmt.format(*texts)
            if dt is D.int1:
                self.assign(r, expr)
            elif name in ROUNDING:
                self.assign(r, self.round_from_f32(f"({expr})", dt, self.name(r)))
            else:   # exact: the fp32 value is representable
                self.assign(r, f"({expr}).to({tl_dtype(dt)})")
            return
        expr = fmt.format(*(a.text for a in args))
        if self.interpret and name in ("and", "or", "xor") and dt is D.int1 and r.shape and \
                any(not self.bsrc.get(id(v), v).shape for v in op.operands):
            # the interpreter holds a scalar comparison's int1 as the left operand's integer type, and
            # combined with a tile mask the result too, which a load or store refuses ("mask has
            # unsupported dtype"): compared with 0, it is bool again
            expr = f"(({expr}) != 0)"
        self.assign(r, expr)

    def _int_div(self, name: str, args: list[_Arg], dt: D.dtype) -> str:
        a, b = args
        if b.literal and int(b.text.strip("()")) not in (0, -1):
            return BINARY[name].format(a.text, b.text)
        if dt.is_unsigned():   # no -1 divisor: only x // 0 = 0 and x % 0 = 0, as on cpu
            safe = f"tl.where({b.text} == 0, 1, {b.text})"
            return f"tl.where({b.text} == 0, 0, {a.text} {'%' if name == 'mod' else '//'} {safe})"
        # the cpu target's defined results: x // 0 = 0, x % 0 = 0, x // -1 = -x (wrapping), x % -1 = 0
        safe = f"tl.where(({b.text} == 0) | ({b.text} == -1), 1, {b.text})"
        if name == "mod":
            return f"tl.where(({b.text} == 0) | ({b.text} == -1), 0, {a.text} % {safe})"
        return (f"tl.where({b.text} == 0, 0, tl.where({b.text} == -1, 0 - {a.text}, {a.text} // {safe}))")

    def _shift(self, name: str, args: list[_Arg], dt: D.dtype) -> str:
        a, b = args
        w = dt.bits
        op = "<<" if name == "shl" else ">>"
        if b.literal and 0 <= int(b.text.strip("()")) < w:
            return f"{a.text} {op} {b.text}"
        # shift amounts outside [0, width) are defined as on cpu: 0 (or the sign for >>)
        ok = f"({b.text} >= 0) & ({b.text} < {w})"
        safe = f"tl.where({ok}, {b.text}, 0)"
        if name == "shl" or dt.is_unsigned():
            return f"tl.where({ok}, {a.text} {op} {safe}, {a.text} ^ {a.text})"   # 0, in a's own type
        return f"tl.where({ok}, {a.text} >> {safe}, {a.text} >> {w - 1})"   # the sign, in a's own type

    def op_cast(self, op: Op) -> None:
        x, r = op.operands[0], op.results[0]
        text = self.typed(x).text
        if id(x) in self.pyints:
            text = f"tl.full([], {text}, {tl_dtype(x.dtype)})"
        self.assign(r, self.cast_expr(text, x.dtype, r.dtype, self.name(r)))

    def round_from_f32(self, x: str, dst: D.dtype, hint: str) -> str:
        """An fp32 value rounded to nearest even to fp16/bf16."""
        if dst is D.bfloat16 and self.explicit_bf16:
            # bits + 0x7fff + (lsb of the result): round to nearest even; NaN stays a quiet NaN
            self.emit(f"{hint}_f = {x}", defs=[f"{hint}_f"], pure=True)
            self.emit(f"{hint}_u = {hint}_f.to(tl.int32, bitcast=True)", defs=[f"{hint}_u"], pure=True)
            return (f"tl.where({hint}_f != {hint}_f, ({hint}_u >> 16) | 64, ({hint}_u + (32767 + (({hint}_u >> 16) & 1)))"
                    f" >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)")
        return f"{x}.to({tl_dtype(dst)}, fp_downcast_rounding=\"rtne\")"

    def _f32_rounded_to_odd(self, x: str, hint: str) -> str:
        """fp64 `x` as fp32 rounded to odd (truncated, the last bit set when inexact): rounding that
        to fp16/bf16 is the correctly rounded conversion (the cpu target's tj_f64_to_f32_odd)."""
        self.emit(f"{hint}_d = {x}", defs=[f"{hint}_d"], pure=True)
        self.emit(f"{hint}_r = {hint}_d.to(tl.float32)", defs=[f"{hint}_r"], pure=True)
        self.emit(f"{hint}_b = {hint}_r.to(tl.int32, bitcast=True)", defs=[f"{hint}_b"], pure=True)
        self.emit(f"{hint}_b = tl.where(tl.abs({hint}_r.to(tl.float64)) > tl.abs({hint}_d), {hint}_b - 1, {hint}_b)",
                  defs=[f"{hint}_b"], pure=True)
        return (f"tl.where(({hint}_r.to(tl.float64) != {hint}_d) & ({hint}_d == {hint}_d), ({hint}_b | 1)"
                f".to(tl.float32, bitcast=True), {hint}_r)")

    def cast_expr(self, x: str, src: D.dtype, dst: D.dtype, hint: str = "tmp") -> str:
        if src is dst:
            return x
        if src.is_ptr() or dst.is_ptr():
            return f"{x}.to({tl_dtype(dst)})"
        if dst.is_bool():
            return f"({x} != {'0.0' if src.is_floating() else '0'})"
        if dst.is_floating():
            if dst in (D.float32, D.float64) or (src.is_floating() and src.bits < dst.bits):
                return f"{x}.to({tl_dtype(dst)})"
            if src is D.float64:               # fp64 -> fp16/bf16: one rounding, as on cpu
                return self.round_from_f32(self._f32_rounded_to_odd(x, hint), dst, hint)
            if src is not D.float32:           # int -> fp16/bf16 and fp16 <-> bf16 go through fp32, as on cpu
                x = f"{x}.to(tl.float32)"
            return self.round_from_f32(x, dst, hint)
        if src.is_floating():
            # truncation toward zero; NaN -> 0 and out-of-range values saturate (the cpu target's tj_f2i)
            if src is not D.float32 and src is not D.float64:
                x = f"{x}.to(tl.float32)"
            lo, hi = dst.int_range()
            return (f"tl.where({x} != {x}, 0, tl.where({x} >= {float(hi + 1)!r}, {hi}, "
                    f"tl.where({x} <= {float(lo)!r}, ({lo}), {x}.to({tl_dtype(dst)}))))")
        return f"{x}.to({tl_dtype(dst)})"

    def op_bitcast(self, op: Op) -> None:
        x, r = op.operands[0], op.results[0]
        self.assign(r, f"{self.typed(x).text}.to({tl_dtype(r.dtype)}, bitcast=True)")

    # -- memory -------------------------------------------------------------------------------------
    def _mask(self, a: _Arg) -> str:
        """A load/store mask. Triton 3.9's interpreter keeps a comparison's numpy data in the type of
        its left operand (int32 for `pid < n`), and an `&` of that with a block mask keeps int32,
        which its load/store refuse ("mask has unsupported dtype"): `!= 0` gives bool data."""
        return f"({a.text}) != 0" if self.interpret and not a.literal else a.text

    def op_load(self, op: Op) -> None:
        args = self.operands(op, tuple(range(1, len(op.operands))))
        parts = [args[0].text]
        if len(args) > 1:
            parts.append(f"mask={self._mask(args[1])}")
        if len(args) > 2:
            parts.append(f"other={args[2].text}")
        self.assign(op.results[0], f"tl.load({', '.join(parts)})", pure=True)

    def op_store(self, op: Op) -> None:
        args = self.operands(op, tuple(range(1, len(op.operands))))
        parts = [args[0].text, args[1].text]
        if len(args) > 2:
            parts.append(f"mask={self._mask(args[2])}")
        self.emit(f"tl.store({', '.join(parts)})")

    # -- reductions ------------------------------------------------------------------------------------
    def op_reduce(self, op: Op) -> None:
        x, r = op.operands[0], op.results[0]
        axis, kind = op.attrs["axis"], op.attrs["kind"]
        acc_t = r.dtype
        xs = self.cast_expr(self.typed(x).text, x.dtype, acc_t, self.name(r) + "_in")
        if acc_t is D.bfloat16 and kind != "sum":
            # max/min of bf16 in fp32 (exact); see BF16_EXACT
            if op.attrs.get("order") == "pairwise":
                self._pairwise(op, f"{xs}.to(tl.float32)", x.shape, axis, kind, D.float32, back=acc_t)
            else:
                self.assign(r, f"tl.{kind}({xs}.to(tl.float32), axis={axis}).to(tl.bfloat16)")
            return
        if op.attrs.get("order") != "pairwise":
            if acc_t.is_bool():
                fn = {"sum": "tl.max", "max": "tl.max", "min": "tl.min"}[kind]   # or / and over int1
                self.assign(r, f"{fn}({xs}.to(tl.int32), axis={axis}) != 0")
            else:
                self.assign(r, f"tl.{kind}({xs}, axis={axis})")
            return
        self._pairwise(op, xs, x.shape, axis, kind, acc_t)

    def _pairwise(self, op: Op, xs: str, shape, axis: int, kind: str, acc_t: D.dtype, back=None) -> None:
        """docs/numerics.md's tree. The extent is a power of two already (Triton tiles are), so no
        padding is needed. Reshaping the last axis [2s] -> [2, s] puts x[a] over x[a + s]; a permute
        and tl.split take the two halves, which are combined elementwise."""
        r = op.results[0]
        n = self.name(r)
        rank = len(shape)
        others = [d for i, d in enumerate(shape) if i != axis]
        t = f"{n}_t"
        self.emit(f"# {n} = {kind} over axis {axis} as a pairwise tree: x[a] (+) x[a + s] for s = "
                  f"{shape[axis] // 2}, ..., 1 (docs/numerics.md)")
        if axis != rank - 1:
            perm = [i for i in range(rank) if i != axis] + [axis]
            xs = f"tl.permute({xs}, {perm})"
        self.emit(f"{t} = {xs}")
        k = len(others)
        s = shape[axis] // 2
        while s >= 1:
            self.emit(f"{n}_lo, {n}_hi = tl.split(tl.permute(tl.reshape({t}, {others + [2, s]}), "
                      f"{list(range(k)) + [k + 1, k]}))")
            if kind == "sum":
                comb = f"{n}_lo | {n}_hi" if acc_t.is_bool() else f"{n}_lo + {n}_hi"
            elif acc_t.is_bool():
                comb = f"{n}_lo | {n}_hi" if kind == "max" else f"{n}_lo & {n}_hi"
            else:
                cmp = ">" if kind == "max" else "<"
                comb = f"tl.where({n}_lo {cmp} {n}_hi, {n}_lo, {n}_hi)"
            self.emit(f"{t} = {comb}")
            s //= 2
        if others:
            res = f"tl.reshape({t}, {others})"
        else:
            # one element left: a reduction of a single element returns it unchanged
            res = f"tl.max({t}, axis=0)" if not acc_t.is_bool() else f"tl.max({t}.to(tl.int32), axis=0) != 0"
        self.assign(r, f"{res}.to({tl_dtype(back)})" if back is not None else res)

    # -- dot -------------------------------------------------------------------------------------------
    def op_dot(self, op: Op) -> None:
        a, b, c = op.operands
        r = op.results[0]
        M, K = a.shape
        N = b.shape[1]
        ta, tb, tc = self.typed(a).text, self.typed(b).text, self.typed(c).text
        if c.dtype.is_floating() and c.dtype is not D.float32:
            # Triton's fp16 accumulator (out_dtype=tl.float16): its rounding is the MMA unit's, so
            # only the fast policy takes it, and only where tl.dot itself runs (fp16 operands, dims >= 16)
            if self.strict or c.dtype is not D.float16 or a.dtype is not D.float16 or min(M, N, K) < 16:
                raise self.err(op, f"dot with a {c.dtype} accumulator is supported by the gpu target only in the "
                                   "fast policy, on fp16 operands with every dimension >= 16; accumulate in fp32 "
                                   "(the default)")
            self.assign(r, f"tl.dot({ta}, {tb}, {tc}, out_dtype=tl.float16)")
            return
        if not self.strict and min(M, N, K) >= 16:
            if self.interpret and a.dtype is D.bfloat16:
                ta, tb = f"{ta}.to(tl.float32)", f"{tb}.to(tl.float32)"
                self.assign(r, f"tl.dot({ta}, {tb}, {tc}, input_precision=\"ieee\")")
            elif a.dtype is D.float32:
                prec = "tf32" if self.tf32 else "ieee"
                self.assign(r, f"tl.dot({ta}, {tb}, {tc}, input_precision=\"{prec}\")")
            else:
                self.assign(r, f"tl.dot({ta}, {tb}, {tc})")
            return
        # one fused multiply-add per k, ascending, per element of C. Column k of A and row k of B
        # are taken with a masked sum whose other terms are -0.0, the exact identity of + (x + -0.0
        # == x for every x, signed zeros, infinities and NaN included), so the extraction is exact
        # whatever order the sum runs in.
        n = self.name(r)
        why = "strict numerics" if self.strict else "a dimension below tl.dot's minimum of 16"
        self.emit(f"# {n} = dot as fused multiply-adds in ascending k ({why})")
        acc_dt = c.dtype
        if a.dtype is not acc_dt:
            ta = self.cast_expr(ta, a.dtype, acc_dt, n + "_a")
            tb = self.cast_expr(tb, b.dtype, acc_dt, n + "_b")
        zero = "-0.0" if acc_dt.is_floating() else "0"
        self.emit(f"{n}_a = {ta}")
        self.emit(f"{n}_b = {tb}")
        self.emit(f"{n}_k = tl.arange(0, {K})")
        self.emit(f"{n} = {tc}", defs=[n])
        self.emit(f"for {n}_i in range(0, {K}):")
        self.indent += 1
        self.emit(f"{n}_ak = tl.sum(tl.where({n}_k[None, :] == {n}_i, {n}_a, {zero}), axis=1)")
        self.emit(f"{n}_bk = tl.sum(tl.where({n}_k[:, None] == {n}_i, {n}_b, {zero}), axis=0)")
        if acc_dt.is_floating():
            self.emit(f"{n} = tl.fma(tl.broadcast_to({n}_ak[:, None], [{M}, {N}]), "
                      f"tl.broadcast_to({n}_bk[None, :], [{M}, {N}]), {n})")
        else:
            self.emit(f"{n} = {n} + {n}_ak[:, None] * {n}_bk[None, :]")
        self.indent -= 1

    # -- control -----------------------------------------------------------------------------------------
    def op_for(self, op: Op) -> None:
        body = op.blocks[0]
        iv, carried = body.args[0], body.args[1:]
        lb, ub, st = (self.literals.get(id(v)) or self.name(v) for v in op.operands[:3])
        for c, init in zip(carried, op.operands[3:]):
            self.emit(f"{self.name(c)} = {self.typed(init).text}")
        if id(op.operands[2]) not in self.literals:
            # a run-time step of 0 runs no iteration, as on the C targets
            ub, st = f"tl.where({st} == 0, {lb}, {ub})", f"tl.where({st} == 0, 1, {st})"
        options = op.attrs.get("options")
        if options:
            opts = "".join(f", {k}={v!r}" for k, v in sorted(options.items()))
            self.emit(f"for {self.name(iv)} in tl.range({lb}, {ub}, {st}{opts}):")
        else:
            self.emit(f"for {self.name(iv)} in range({lb}, {ub}, {st}):")
        self.pyints.add(id(iv))
        self.indent += 1
        n_before = len(self.lines)
        self.loops.append(carried)
        self.block(body)
        self.loops.pop()
        if len(self.lines) == n_before:
            self.emit("pass")
        self.indent -= 1
        for c, res in zip(carried, op.results):
            self.assign(res, self.name(c))

    def op_yield(self, op: Op) -> None:
        # the enclosing op's carried values / results take the yielded ones (one tuple assignment:
        # parallel); a while's condition block yields its condition
        carried = self.loops[-1] if self.loops else []
        if not carried:
            return
        lhs = ", ".join(self.name(c) for c in carried)
        rhs = ", ".join(self.typed(v).text for v in op.operands)
        self.emit(f"{lhs} = {rhs}")
