"""The strict numerics policy: rewrites the IR so every target computes the same bits.

- `exp`, `exp2`, `log`, `log2`, `rsqrt`, `sigmoid` become fixed sequences of correctly rounded
  IEEE operations (`fma`, `+`, `*`, `/`, `floor`, integer bit tricks); fp16/bf16 inputs go
  through fp32 and are rounded once at the end. `sqrt` and `/` stay: IEEE defines them exactly,
  and every target must render them correctly rounded.
- Reductions are marked `order=pairwise`: the extent is padded to a power of two P with the
  identity, then element i is combined with element i + P/2, repeatedly, halving P
  (targets implement exactly this tree).
- `dot` needs no rewrite: every target computes it as a chain of fused multiply-adds in
  ascending k per output element, starting from the accumulator.
- `tanh`, `erf`, `log1p`, `expm1`, `pow`, `rint`: sequences in strict_math.py.
- `sin`/`cos` have no strict sequence and are refused; so is a floating-point `atomic_add`.
The sequences are documented in docs/numerics.md, and tests emulate them with numpy.
"""
from __future__ import annotations

from . import dtypes as D
from .errors import CompilationError
from .ir import Block, Function, Op, Value
from .ir.ops import ATOMIC_RMW, OPS, REDUCE, RINT, ops_with
from .semantic import Builder, Tile
from .strict_math import StrictMoreMath

LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125          # ln2 split so n * LN2_HI is exact for |n| < 2^11
LN2_LO = 1.428606765330187e-06
# e^r = 1 + r + r^2/2! + ... + r^7/7! on |r| <= ln2/2: truncation error < 0.1 ulp
EXP_POLY = [1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0]
SQRT2 = 1.4142135623730951
# log(1+f) = 2*atanh(s), s = f/(2+f): 2s + 2s^3/3 + ... + 2s^11/11 on |s| <= 0.1716
LOG_POLY = [2.0 / 11, 2.0 / 9, 2.0 / 7, 2.0 / 5, 2.0 / 3, 2.0]
EXP_HI, EXP_LO = 88.72283935546875, -103.97207641601562


class _StrictBuilder(StrictMoreMath):
    EXP_POLY, LOG_POLY = EXP_POLY, LOG_POLY

    def __init__(self, b: Builder):
        self.b = b

    def c(self, v: float, like: Tile) -> Tile:
        return self.b.broadcast_to(self.b.const(v, like.dtype), like.shape)

    def fma(self, x, y, z):
        return self.b.op1("fma", [x, y, z])

    def bin(self, name, x, y):
        return self.b.op1(name, [x, y])

    def exp(self, x: Tile) -> Tile:
        b, c = self.b, self.c
        n = b.op1("floor", [self.fma(x, c(LOG2E, x), c(0.5, x))])
        r = self.fma(n, c(-LN2_HI, x), x)
        r = self.fma(n, c(-LN2_LO, x), r)
        p = self._horner(EXP_POLY, r)
        y = self._scale2(p, n)
        y = b.op1("where", [self.bin("gt", x, c(EXP_HI, x)), c(float("inf"), x), y])
        y = b.op1("where", [self.bin("lt", x, c(EXP_LO, x)), c(0.0, x), y])
        return b.op1("where", [self.bin("ne", x, x), x, y])   # NaN stays NaN

    def exp2(self, x: Tile) -> Tile:
        b, c = self.b, self.c
        n = b.op1("floor", [self.bin("add", x, c(0.5, x))])
        r = self.bin("mul", self.bin("sub", x, n), c(0.6931471805599453, x))
        y = self._scale2(self._horner(EXP_POLY, r), n)
        y = b.op1("where", [self.bin("gt", x, c(128.0, x)), c(float("inf"), x), y])
        y = b.op1("where", [self.bin("lt", x, c(-150.0, x)), c(0.0, x), y])
        return b.op1("where", [self.bin("ne", x, x), x, y])

    def _horner(self, coeffs, r):
        acc = self.c(coeffs[0], r)
        for k in coeffs[1:]:
            acc = self.fma(acc, r, self.c(k, r))
        return acc

    def _pow2(self, k: Tile) -> Tile:
        """2**k for integer k in [-126, 127], built from its exponent bits."""
        b = self.b
        biased = b.op1("add", [k, b.broadcast_to(b.const(127, D.int32), k.shape)])
        bits = b.op1("shl", [biased, b.broadcast_to(b.const(23, D.int32), k.shape)])
        return b.op1("bitcast", [bits], {"to": D.float32})

    def _scale2(self, p: Tile, n: Tile) -> Tile:
        """p * 2**n in two exact steps, so results near overflow or in the subnormal range round once."""
        b = self.b
        n = b.op1("max", [n, self.c(-252.0, n)])
        n = b.op1("min", [n, self.c(254.0, n)])
        return self._scale2_int(p, b.cast(n, D.int32))

    def _scale2_int(self, p: Tile, ni: Tile) -> Tile:
        """p * 2**ni for int32 ni in [-252, 254]: ni split into two halves, each a normal power of two."""
        b = self.b
        half = b.op1("shr", [ni, b.broadcast_to(b.const(1, D.int32), ni.shape)])
        rest = b.op1("sub", [ni, half])
        return self.bin("mul", self.bin("mul", p, self._pow2(half)), self._pow2(rest))

    def log(self, x: Tile) -> Tile:
        c = self.c
        ef, lp = self._log_parts(x)
        y = self.fma(ef, c(LN2_HI, x), self.fma(ef, c(LN2_LO, x), lp))
        y = self.b.op1("where", [self.bin("eq", x, c(float("inf"), x)), x, y])
        y = self.b.op1("where", [self.bin("eq", x, c(0.0, x)), c(float("-inf"), x), y])
        y = self.b.op1("where", [self.bin("lt", x, c(0.0, x)), c(float("nan"), x), y])
        return self.b.op1("where", [self.bin("ne", x, x), x, y])

    def _log_parts(self, x: Tile) -> tuple[Tile, Tile]:
        """(e, log(m)) with x = 2^e * m, m in (sqrt(1/2), sqrt(2)], for finite x > 0."""
        b, c = self.b, self.c
        i32 = lambda v: b.broadcast_to(b.const(v, D.int32), x.shape)  # noqa: E731
        tiny = self.bin("lt", x, c(1.1754943508222875e-38, x))
        xs = b.op1("where", [tiny, self.bin("mul", x, c(8388608.0, x)), x])     # subnormals: scale by 2^23
        bits = b.op1("bitcast", [xs], {"to": D.int32})
        e = self.bin("sub", self.bin("and", b.op1("shr", [bits, i32(23)]), i32(255)), i32(127))
        e = b.op1("where", [tiny, self.bin("sub", e, i32(23)), e])
        m = b.op1("bitcast", [self.bin("or", self.bin("and", bits, i32(0x7FFFFF)), i32(0x3F800000))],
                  {"to": D.float32})
        big = self.bin("gt", m, c(SQRT2, x))
        m = b.op1("where", [big, self.bin("mul", m, c(0.5, x)), m])
        e = b.op1("where", [big, self.bin("add", e, i32(1)), e])
        f = self.bin("sub", m, c(1.0, x))
        s = self.bin("div", f, self.bin("add", f, c(2.0, x)))
        s2 = self.bin("mul", s, s)
        poly = self._horner(LOG_POLY, s2)
        lp = self.bin("mul", s, poly)
        return b.cast(e, D.float32), lp

    def log2(self, x: Tile) -> Tile:
        return self.bin("mul", self.log(x), self.c(LOG2E, x))

    def rsqrt(self, x: Tile) -> Tile:
        return self.bin("div", self.c(1.0, x), self.b.op1("sqrt", [x]))

    def sigmoid(self, x: Tile) -> Tile:
        one = self.c(1.0, x)
        return self.bin("div", one, self.bin("add", one, self.exp(self.b.op1("neg", [x]))))


# the ops strict rewrites into sequences: a method of _StrictBuilder each
REWRITES = ops_with("strict_sequence")


def lower_strict(fn: Function) -> None:
    _lower_block(fn, fn.body, _StrictBuilder, math_only=False, only=None)


def lower_math_block(fn: Function, block: Block, builder, only=None) -> None:
    """Only the math sequences of `builder` (a _StrictBuilder), for all of REWRITES or the ops in
    `only`: the fast policy's software math (compiler/fast_math.py)."""
    _lower_block(fn, block, builder, math_only=True, only=only)


def _check_strict(fn: Function, op: Op) -> None:
    if op.name in REWRITES and op.name != RINT and op.operands[0].dtype is D.float64:
        raise CompilationError.at(op.loc, f"tl.{op.name} of float64 has no strict (bitwise-reproducible) sequence; "
                                  "the strict policy defines fp32 ones (compute in fp32 with .to(tl.float32), or "
                                  "use the fast numerics policy for this kernel)", kernel=fn.name)
    if OPS[op.name].has("unreproducible"):
        raise CompilationError.at(op.loc, f"tl.{op.name} has no strict (bitwise-reproducible) lowering; use the "
                                  "fast numerics policy for this kernel", kernel=fn.name)
    if op.name == ATOMIC_RMW and op.attrs["kind"] == "add" and op.operands[1].dtype.is_floating():
        raise CompilationError.at(op.loc, "tl.atomic_add of floating-point values is not reproducible: the order "
                                  "of the additions is the hardware's, so the strict numerics policy refuses it. "
                                  "Use integer atomics, or reduce in a fixed order (tl.sum within a program, or a "
                                  "second kernel over per-program partial results)", kernel=fn.name)


def _lower_block(fn: Function, block: Block, builder, math_only: bool, only) -> None:
    out: list[Op] = []
    for op in block.ops:
        for sub in op.blocks:
            _lower_block(fn, sub, builder, math_only, only)
        if not math_only:
            _check_strict(fn, op)
        if op.name == REDUCE and not math_only:
            op.attrs["order"] = "pairwise"
        if op.name not in REWRITES or (only is not None and op.name not in only) \
                or op.operands[0].dtype is D.float64:   # the sequences are fp32's; fp64 keeps its libm
            out.append(op)
            continue
        tmp = Block()
        b = Builder(tmp)
        b.loc = op.loc
        xs = [Tile(v) for v in op.operands]
        dt = xs[0].dtype
        if dt is not D.float32:
            xs = [b.cast(x, D.float32) for x in xs]
        y = getattr(builder(b), op.name)(*xs)
        if dt is not D.float32:
            y = b.cast(y, dt)
        out.extend(tmp.ops)
        _replace_uses(fn, op.results[0], y.value)
    block.ops = out


def _replace_uses(fn: Function, old: Value, new: Value) -> None:
    for o in fn.walk():
        o.operands = [new if v is old else v for v in o.operands]
