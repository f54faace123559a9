"""16-lane fp32 vector code for the kunlun target's fast policy (`float32x16_t`, `vload_lm_*`,
`vv*_float32x16`, `svmul_float32x16`).

Only intrinsics that public Kunlun kernel code uses (docs/kunlun.md, Sources) are emitted: vector
loads/stores from LM, vvadd, vvmul, vvmax, scalar-and-vector svadd and svmul, and the dot's svmac
(one rounding, so the dot is vectorised in both policies). `a - b` is spelled `a + (-1 * b)` (the
same IEEE result; no public code shows a vector subtract) and `-a` as `-1 * a`. A nest is
vectorised when its innermost extent is a multiple of 16 and its per-element expression is built
from those ops over fp32 LM buffers read at the nest's own index, scalars and constants, with a
`where` whose mask the code around has proven all true (the fast path of a masked nest) read as
its true operand; anything else stays scalar C. Strict elementwise nests stay scalar.
"""
from __future__ import annotations

import re

from compiler import dtypes as D
from compiler.ir.ops import ADD, BROADCAST, MUL, NEG, OPS, SUB, WHERE

LANES = 16
_VLOAD = re.compile(r"vload_lm_float32x16\(&(\w+)\[")
# no elementwise max: tl.maximum ignores a NaN operand (compiler/value_rules.py), and what
# vvmax_float32x16 does with one is not documented; reductions use it (their operands hold no NaN)
_VV = {ADD: "vvadd_float32x16", MUL: "vvmul_float32x16"}
_SV = {ADD: "svadd_float32x16", MUL: "svmul_float32x16"}   # scalar op vector


class VectorExpr:
    """Builds `float32x16_t` expressions for values of one shape at a vector index."""

    def __init__(self, lowering, shape: tuple[int, ...]):
        self.low = lowering
        self.shape = shape

    def _scalar(self, v) -> str | None:
        if v.type.is_scalar and v.dtype is D.float32:
            return self.low.ev(v, (), None)
        op = v.owner
        if op is not None and op.name == BROADCAST and op.operands[0].type.is_scalar:
            return self._scalar(op.operands[0])
        return None

    def _build(self, v, idx) -> str | None:
        """A vector expression, a scalar expression prefixed with '#', or None (no vector form)."""
        low = self.low
        s = self._scalar(v)
        if s is not None:
            return "#" + s
        if v.dtype is not D.float32 or v.shape != self.shape:
            return None
        if id(v) in low.buffers:
            return f"vload_lm_float32x16(&{low.name(v)}[{low.linear(idx, self.shape)}])"
        op = v.owner
        if op is not None and op.name == WHERE and id(op.operands[0]) in low.known_true:
            return self._build(op.operands[1], idx)   # the fast path of a where split on its mask
        if op is None or not OPS[op.name].has("ring"):
            return None
        ops = [self._build(o, idx) for o in op.operands]
        if any(e is None for e in ops) or all(e.startswith("#") for e in ops):
            return None   # no vector form, or a scalar op (the C lowering handles it)
        if op.name == NEG:
            return _negated(ops[0])
        a, b = ops
        if op.name == SUB:   # a - b is a + (-b) exactly; the negation is a multiply by -1
            op_name, b = "add", _negated(b)
        else:
            op_name = op.name
        if a.startswith("#") or b.startswith("#"):
            if op_name not in _SV:
                return None   # no scalar-vector intrinsic
            sc, vec = (a[1:], b) if a.startswith("#") else (b[1:], a)
            return f"{_SV[op_name]}({sc}, {vec})"
        return f"{_VV[op_name]}({a}, {b})"


def _negated(e: str) -> str:
    """-e for a vector expression or a '#'-prefixed scalar one (a sign flip: exact)."""
    return f"#(-({e[1:]}))" if e.startswith("#") else f"svmul_float32x16(-1.0f, {e})"


def vector_form(lowering, v) -> str | None:
    """`v` at the vector index (i0, i1, ...) as a `float32x16_t` expression, or None when it has no
    vector form (see the module docstring). Call it before `v` itself gets a buffer."""
    shape = v.shape
    if not shape or shape[-1] % LANES or v.dtype is not D.float32:
        return None
    e = VectorExpr(lowering, shape)._build(v, tuple(f"i{k}" for k in range(len(shape))))
    return None if e is None or e.startswith("#") else e


def where_mask(lowering, v):
    """The tile mask of the one `where` (or of every `where`, when they share it) that evaluating
    `v` element by element reads, or None."""
    masks, stack, seen = {}, [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or x.type.is_scalar or id(x) in lowering.buffers or x.owner is None:
            continue
        seen.add(id(x))
        op = x.owner
        if op.name == WHERE and not op.operands[0].type.is_scalar:
            masks[id(op.operands[0])] = op.operands[0]
        if OPS[op.name].has("ring") or op.name == WHERE:
            stack.extend(op.operands[1:] if op.name == WHERE else op.operands)
    return next(iter(masks.values())) if len(masks) == 1 else None


def vector_nest(lowering, shape: tuple[int, ...], dest: str, expr: str) -> None:
    """Emits `dest[i...] = expr` over `shape`, 16 lanes per step of the innermost loop."""
    low = lowering
    low.begin_group({**{b: ("V", False) for b in _VLOAD.findall(expr)}, dest: ("V", True)})
    n = 1
    for d in shape:
        n *= d
    low.vector_nest_work += n * low.loop_weight()
    idx = tuple(f"i{k}" for k in range(len(shape)))
    for k, n in enumerate(shape):
        step = LANES if k == len(shape) - 1 else 1
        low.emit(f"for (int {idx[k]} = 0; {idx[k]} < {n}; {idx[k]} += {step}) {{")
        low.indent += 1
    low.emit(f"vstore_lm_float32x16(&{dest}[{low.linear(idx, shape)}], {expr});")
    for _ in shape:
        low.indent -= 1
        low.emit("}")


def emit_dot(lowering, A: str, B: str, C: str, M: int, N: int, K: int) -> None:
    """C[m][n:n+16] = fma(A[m][k], B[k][n:n+16], C[m][n:n+16]) for k ascending: `svmac_float32x16`
    (scalar times vector plus vector, one rounding) is the scalar fma chain 16 lanes at a time, so
    both policies take it and strict stays bitwise equal to the cpu target."""
    lowering.begin_group({B: ("V", False), C: ("V", True)})   # A is read by scalar loads
    e = lowering.emit
    e(f"for (int m = 0; m < {M}; ++m)")
    e(f"    for (int k = 0; k < {K}; ++k) {{")
    e(f"        float const a_mk = {A}[m * {K} + k];")
    e(f"        for (int n = 0; n < {N}; n += {LANES}) {{")
    e(f"            float32x16_t c_ = vload_lm_float32x16(&{C}[m * {N} + n]);")
    e(f"            float32x16_t b_ = vload_lm_float32x16(&{B}[k * {N} + n]);")
    e(f"            vstore_lm_float32x16(&{C}[m * {N} + n], svmac_float32x16(a_mk, b_, c_));")
    e("        }")
    e("    }")


_COMBINE = {"sum": "vvadd_float32x16", "max": "vvmax_float32x16"}


def reduction_form(lowering, op) -> str | None:
    """The vector expression a fast-policy sum/max over the last axis reads, or None when the
    reduction stays scalar (strict's pairwise trees always do)."""
    x, r = op.operands[0], op.results[0]
    if op.attrs.get("order") == "pairwise" or op.attrs["kind"] not in _COMBINE or r.dtype is not D.float32:
        return None
    if op.attrs["axis"] != len(x.shape) - 1:
        return None
    return vector_form(lowering, x)


def emit_reduce(lowering, op, expr: str) -> None:
    """Per row: 16 lane accumulators over the row's 16-element chunks (vector loads and vvadd /
    vvmax, chunks in ascending order), stored to an LM lane buffer; then each row's 16 lanes
    combined in lane order by scalar code. A fixed order: deterministic and batch-invariant."""
    low = lowering
    x, r = op.operands[0], op.results[0]
    kind, rows_shape, n = op.attrs["kind"], x.shape[:-1], x.shape[-1]
    rows = 1
    for d in rows_shape:
        rows *= d
    lanes = low.local_buffer("float", low.fresh("lanes"), rows * LANES)
    low.begin_group({**{b: ("V", False) for b in _VLOAD.findall(expr)}, lanes: ("V", True)})
    low.vector_nest_work += rows * n * low.loop_weight()
    idx = tuple(f"i{k}" for k in range(len(x.shape)))
    row = low.linear(idx[:-1], rows_shape)
    low.emit("{")
    low.indent += 1
    for k, d in enumerate(rows_shape):
        low.emit(f"for (int {idx[k]} = 0; {idx[k]} < {d}; ++{idx[k]}) {{")
        low.indent += 1
    last = idx[-1]
    low.emit(f"float32x16_t acc_; {{ const int {last} = 0; acc_ = {expr}; }}")
    low.emit(f"for (int {last} = {LANES}; {last} < {n}; {last} += {LANES}) acc_ = {_COMBINE[kind]}(acc_, {expr});")
    low.emit(f"vstore_lm_float32x16(&{lanes}[({row}) * {LANES}], acc_);")
    for _ in range(len(rows_shape) + 1):
        low.indent -= 1
        low.emit("}")
    low.begin_group()   # the lanes, read by scalar code: the fence stage puts mfence_lm before it
    low.work += rows * LANES * low.loop_weight()
    combine = "{0} + {1}" if kind == "sum" else "tj_rmax({0}, {1})"   # NaN-free (compiler/value_rules.py)
    if r.type.is_scalar:
        name = low.name(r)
        low.emit(f"float {name} = {lanes}[0];")
        low.emit(f"for (int l_ = 1; l_ < {LANES}; ++l_) {name} = {combine.format(name, f'{lanes}[l_]')};")
        return
    name = low.declare_buffer(r)
    low.emit(f"for (int j_ = 0; j_ < {rows}; ++j_) {{")
    low.emit(f"    float a_ = {lanes}[j_ * {LANES}];")
    low.emit(f"    for (int l_ = 1; l_ < {LANES}; ++l_) a_ = {combine.format('a_', f'{lanes}[j_ * {LANES} + l_]')};")
    low.emit(f"    {name}[j_] = a_;")
    low.emit("}")
