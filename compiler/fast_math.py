"""The software math of the fast policy, for targets that prefer sequences to their own library
(`Target.fast_software_math`: on cpu they vectorise, the C library's expf does not).

They are the strict sequences (compiler/strict.py) except `exp` and `exp2`, which keep the strict
polynomial (within 1 ulp) but take the cheapest way around it: the input is clamped by two
selects, which NaN passes through, to a range where the scale 2^n stays two normal powers of two;
n = rint(x / ln2) comes from adding 1.5 * 2^23, whose low mantissa bits then hold n, so neither a
floor nor a float-to-int conversion is needed; and results beyond the range come out as inf and 0
by the scaling itself instead of three more selects. A silu runs about 1.5x faster on cpu with it
(docs/numerics.md). Results are not the strict ones' bits: n is rounded to even at ties where
strict rounds up, so r differs at those inputs.
"""
from __future__ import annotations

from . import dtypes as D
from .ir import Function
from .semantic import Tile
from .strict import EXP_POLY, LN2_HI, LN2_LO, LOG2E, _StrictBuilder, lower_math_block

ROUNDER = 12582912.0          # 1.5 * 2^23: t = y + ROUNDER holds rint(y) in its low bits, |y| < 2^22
ROUNDER_BITS = 0x4B400000     # the bits of ROUNDER
# exp's clamp: exp(-104) rounds to 0 and exp(89) overflows, so n = rint(x / ln2) in [-150, 128]
# covers every finite result, each half of n within a normal power of two
EXP_CLAMP = (-104.0, 89.0)
EXP2_CLAMP = (-151.0, 129.0)


class FastMath(_StrictBuilder):
    def _clamp(self, x: Tile, lo: float, hi: float) -> Tile:
        """x limited to [lo, hi] by selects on `<` and `>`, which are false for NaN, so NaN stays
        (max/min would drop it)."""
        c = self.c
        x = self.where(self.bin("lt", x, c(lo, x)), c(lo, x), x)
        return self.where(self.bin("gt", x, c(hi, x)), c(hi, x), x)

    def _scale_rounded(self, p: Tile, t: Tile) -> Tile:
        """p * 2^n where t = n + ROUNDER; n in [-252, 254] is split into two halves, so a
        subnormal or overflowing result rounds once."""
        b = self.b
        return self._scale2_int(p, b.op1("sub", [b.op1("bitcast", [t], {"to": D.int32}),
                                                 b.broadcast_to(b.const(ROUNDER_BITS, D.int32), t.shape)]))

    def exp(self, x: Tile) -> Tile:
        c = self.c
        x = self._clamp(x, *EXP_CLAMP)
        t = self.fma(x, c(LOG2E, x), c(ROUNDER, x))
        n = self.bin("sub", t, c(ROUNDER, x))
        r = self.fma(n, c(-LN2_LO, x), self.fma(n, c(-LN2_HI, x), x))
        return self._scale_rounded(self._horner(EXP_POLY, r), t)

    def exp2(self, x: Tile) -> Tile:
        c = self.c
        x = self._clamp(x, *EXP2_CLAMP)
        t = self.bin("add", x, c(ROUNDER, x))
        r = self.bin("mul", self.bin("sub", x, self.bin("sub", t, c(ROUNDER, x))), c(0.6931471805599453, x))
        return self._scale_rounded(self._horner(EXP_POLY, r), t)


def lower_software_math(fn: Function, only=None) -> None:
    """The math sequences (all of them, or the ops in `only`) for the fast policy of a target that
    asks for them (`Target.fast_software_math`)."""
    lower_math_block(fn, fn.body, FastMath, only)
