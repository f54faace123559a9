"""Strict sequences for tanh, erf, expm1, log1p, pow and rint (a mixin of strict._StrictBuilder,
which has exp, exp2, log and the helpers `c`, `fma`, `bin`, `_horner`, `_pow2`, `_scale2`).
Each is a fixed sequence of correctly rounded IEEE operations; docs/numerics.md states them and
their measured accuracy. The polynomial coefficients were fitted for this module (weighted least
squares on Chebyshev nodes against a high-precision reference), then rounded to fp32."""
from __future__ import annotations

from . import dtypes as D

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
LN2_HI = 0.693145751953125
LN2_LO = 1.428606765330187e-06
EXP_HI = 88.72283935546875
# (expm1(r) - r) / r^2 = 1/2 + r/6 + ... + r^6/8! on |r| <= ln2/2 (Taylor; truncation < 1e-9)
EXPM1_Q = [1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5]
# erf(x) / x as a polynomial in x^2 on |x| < 1 (relative error 1.2e-9 before rounding)
ERF_SMALL = [7.854221621528268e-05, -0.0008010311285033822, 0.005188342649489641, -0.02685382030904293,
             0.1128358542919159, -0.3761262595653534, 1.1283791065216064]
# erfc(x) * exp(x^2) as a polynomial in 1/x on 1 <= x < 4 (relative error 2.2e-9 before rounding)
ERFC_MID = [-0.03674822300672531, 0.2556086778640747, -0.786020815372467, 1.3853198289871216,
            -1.485031247138977, 0.8731518387794495, -0.05724118649959564, -0.28885379433631897,
            0.00372952688485384, 0.5636391043663025, 2.9895954867242835e-05]
TWO23 = 8388608.0


class StrictMoreMath:
    def where(self, c, x, y):
        return self.b.op1("where", [c, x, y])

    def _copysign(self, mag, sign_of):
        """`mag` (>= 0 or NaN) with the sign bit of `sign_of`: bit operations, exact."""
        b = self.b
        i32 = lambda v: b.broadcast_to(b.const(v, D.int32), mag.shape)  # noqa: E731
        mb = b.op1("bitcast", [mag], {"to": D.int32})
        sb = b.op1("and", [b.op1("bitcast", [sign_of], {"to": D.int32}), i32(-(2 ** 31))])
        return b.op1("bitcast", [b.op1("or", [mb, sb])], {"to": D.float32})

    def _reduce_ln2(self, x):
        """(n, r): x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2 (as exp)."""
        c = self.c
        n = self.b.op1("floor", [self.fma(x, c(LOG2E, x), c(0.5, x))])
        r = self.fma(n, c(-LN2_HI, x), x)
        return n, self.fma(n, c(-LN2_LO, x), r)

    def expm1(self, x):
        """n, r as exp; p = fma(r*r, Q(r), r) = expm1(r); for n <= 24: fma(2^n, p, 2^n - 1) (2^n - 1
        exact), else (p + 1) * 2^n - 1; x > 88.72... -> inf, x < -17.5 -> -1, +-0 and NaN kept."""
        b, c = self.b, self.c
        n, r = self._reduce_ln2(x)
        p = self.fma(self.bin("mul", r, r), self._horner(EXPM1_Q, r), r)
        nl = b.op1("max", [b.op1("min", [n, c(24.0, x)]), c(-30.0, x)])
        t = self._pow2(b.cast(nl, D.int32))
        small = self.fma(t, p, self.bin("sub", t, c(1.0, x)))
        big = self.bin("sub", self._scale2(self.bin("add", p, c(1.0, x)), n), c(1.0, x))
        y = self.where(self.bin("gt", n, c(24.0, x)), big, small)
        y = self.where(self.bin("gt", x, c(EXP_HI, x)), c(float("inf"), x), y)
        y = self.where(self.bin("lt", x, c(-17.5, x)), c(-1.0, x), y)
        y = self.where(self.bin("eq", x, c(0.0, x)), x, y)
        return self.where(self.bin("ne", x, x), x, y)

    def log1p(self, x):
        """-0.2929 < x < 0.4142: s * P(s^2) with s = x / (x + 2) (log's polynomial, without rounding
        1 + x); elsewhere u = 1 + x and log(u) * (x / (u - 1)); inf -> inf, +-0 kept."""
        c = self.c
        s = self.bin("div", x, self.bin("add", x, c(2.0, x)))
        near = self.bin("mul", s, self._horner(self.LOG_POLY, self.bin("mul", s, s)))
        u = self.bin("add", x, c(1.0, x))
        d = self.bin("sub", u, c(1.0, x))
        y = self.bin("mul", self.log(u), self.bin("div", x, d))
        inside = self.b.op1("and", [self.bin("gt", x, c(-0.2928932188134524, x)),
                                    self.bin("lt", x, c(0.41421356237309515, x))])
        y = self.where(inside, near, y)
        return self.where(self.bin("eq", x, c(float("inf"), x)), x, y)

    def tanh(self, x):
        """e = expm1(-2|x|); -e / (e + 2) with the sign bit of x."""
        c = self.c
        a = self.b.op1("abs", [x])
        e = self.expm1(self.bin("mul", a, c(-2.0, x)))
        t = self.bin("div", self.b.op1("neg", [e]), self.bin("add", e, c(2.0, x)))
        return self._copysign(t, x)

    def erf(self, x):
        """|x| < 1: |x| * P(x^2); 1 <= |x| < 4: 1 - exp(-x^2) * Q(1/|x|) with x^2 split exactly by fma;
        |x| >= 4: 1; the sign bit of x."""
        c = self.c
        a = self.b.op1("abs", [x])
        small = self.bin("mul", a, self._horner(ERF_SMALL, self.bin("mul", a, a)))
        q = self._horner(ERFC_MID, self.bin("div", c(1.0, x), a))
        hi = self.bin("mul", a, a)
        lo = self.fma(a, a, self.b.op1("neg", [hi]))
        e = self.exp(self.b.op1("neg", [hi]))
        e = self.fma(self.b.op1("neg", [e]), lo, e)
        mid = self.fma(self.b.op1("neg", [e]), q, c(1.0, x))
        y = self.where(self.bin("lt", a, c(1.0, x)), small, mid)
        y = self.where(self.bin("ge", a, c(4.0, x)), c(1.0, x), y)
        return self._copysign(y, x)

    def rint(self, x):
        """|x| < 2^23: (|x| + 2^23) - 2^23 (rounds to even) with the sign bit of x; else x."""
        c = self.c
        a = self.b.op1("abs", [x])
        r = self.bin("sub", self.bin("add", a, c(TWO23, x)), c(TWO23, x))
        return self.where(self.bin("lt", a, c(TWO23, x)), self._copysign(r, x), x)

    def pow(self, x, y):
        """|x|^y = 2^(y * log2|x|) with log2|x| = e + l (e an integer, |l| <= 1/2, from log's
        reduction), y*e split exactly by fma, the exponent reduced twice to an integer n and
        |f| <= 1/2; 2^f as exp2's polynomial, scaled by 2^n. Then IEEE pow's special cases."""
        return self._pow_special(x, y, self._pow_main(self.b.op1("abs", [x]), y))

    def _pow_main(self, ax, y):
        c = self.c
        ef, lp = self._log_parts(ax)
        l2 = self.bin("mul", lp, c(LOG2E, ax))
        ye = self.bin("mul", y, ef)
        ye_lo = self.fma(y, ef, self.b.op1("neg", [ye]))
        n1 = self.b.op1("floor", [self.bin("add", ye, c(0.5, ax))])
        f = self.bin("add", self.bin("sub", ye, n1), self.fma(y, l2, ye_lo))
        n2 = self.b.op1("floor", [self.bin("add", f, c(0.5, ax))])
        f = self.bin("sub", f, n2)
        p = self._horner(self.EXP_POLY, self.bin("mul", f, c(LN2, ax)))
        res = self._scale2(p, self.bin("add", n1, n2))
        t = self.bin("add", ye, self.bin("mul", y, l2))   # the exponent, for overflow
        res = self.where(self.bin("gt", t, c(1024.0, ax)), c(float("inf"), ax), res)
        return self.where(self.bin("lt", t, c(-1024.0, ax)), c(0.0, ax), res)

    def _pow_special(self, x, y, res):
        b, c = self.b, self.c
        bn = lambda name, p, q: b.op1(name, [p, q])  # noqa: E731
        inf, one, zero = c(float("inf"), x), c(1.0, x), c(0.0, x)
        ax, ay = b.op1("abs", [x]), b.op1("abs", [y])
        res = self.where(bn("eq", ax, zero), self.where(bn("lt", y, zero), inf, zero), res)
        res = self.where(bn("eq", ax, inf), self.where(bn("lt", y, zero), zero, inf), res)
        grows = bn("eq", bn("gt", ax, one), bn("gt", y, zero))
        res = self.where(bn("eq", ay, inf), self.where(bn("eq", ax, one), one, self.where(grows, inf, zero)), res)
        fy = b.op1("floor", [y])
        yint = bn("eq", fy, y)
        half = b.op1("floor", [bn("mul", y, c(0.5, x))])
        yodd = bn("and", bn("and", yint, bn("lt", ay, c(16777216.0, x))),
                  bn("eq", bn("sub", y, bn("mul", half, c(2.0, x))), one))
        neg = bn("lt", b.op1("bitcast", [x], {"to": D.int32}), b.broadcast_to(b.const(0, D.int32), x.shape))
        res = self.where(bn("and", neg, yodd), b.op1("neg", [res]), res)
        finite_nonzero = bn("and", bn("lt", ax, inf), bn("gt", ax, zero))
        bad = bn("and", bn("and", neg, b.op1("not", [yint])), finite_nonzero)
        nan = c(float("nan"), x)
        res = self.where(bad, nan, res)
        res = self.where(bn("or", bn("ne", x, x), bn("ne", y, y)), nan, res)
        res = self.where(bn("eq", y, zero), one, res)
        return self.where(bn("eq", x, one), one, res)
