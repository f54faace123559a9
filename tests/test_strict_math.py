"""The strict sequences of tanh, erf, expm1, log1p, rint and pow (compiler/strict_math.py,
docs/numerics.md): the cpu target equals an independent numpy emulation of the documented order
bitwise, the results are within the documented ulps of fp64, pow has IEEE pow's special cases, and
kunlun:xpu3 (host emulation) and gpu:interpret give the same bits as cpu."""
from __future__ import annotations

import numpy as np
import pytest
from tiers import on_targets
import torch
from triton.language.extra import libdevice

import compiler
import targets.kunlun
from compiler import kernel, language as tl
from compiler.strict_math import ERF_SMALL, ERFC_MID, EXPM1_Q
from compiler.target import register_target
from test_strict import F, emu_exp, emu_log, fma, pow2

pytestmark = pytest.mark.compile

register_target("kunlun", targets.kunlun.TARGET)
OPS = ("tanh", "erf", "expm1", "log1p", "rint", "pow")


@kernel
def math_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """Row k of x / o is op OPS[k] (one compilation serves every op)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    tl.store(o_ptr + offs, libdevice.tanh(tl.load(x_ptr + offs, mask=m, other=1.0)), mask=m)
    tl.store(o_ptr + n + offs, tl.math.erf(tl.load(x_ptr + n + offs, mask=m, other=1.0)), mask=m)
    tl.store(o_ptr + 2 * n + offs, libdevice.expm1(tl.load(x_ptr + 2 * n + offs, mask=m, other=1.0)), mask=m)
    tl.store(o_ptr + 3 * n + offs, libdevice.log1p(tl.load(x_ptr + 3 * n + offs, mask=m, other=1.0)), mask=m)
    tl.store(o_ptr + 4 * n + offs, libdevice.rint(tl.load(x_ptr + 4 * n + offs, mask=m, other=1.0)), mask=m)
    tl.store(o_ptr + 5 * n + offs, libdevice.pow(tl.load(x_ptr + 5 * n + offs, mask=m, other=1.0), y), mask=m)


def _inputs(op, n=8192):
    g = torch.Generator().manual_seed(11)
    x = {"tanh": torch.randn(n, generator=g) * 4, "erf": torch.randn(n, generator=g) * 2,
         "expm1": torch.randn(n, generator=g) * 12, "log1p": torch.rand(n, generator=g) * 20 - 0.999,
         "rint": torch.randn(n, generator=g) * 1e3, "pow": torch.rand(n, generator=g) * 100}[op]
    x[: n // 8] *= 1e-4                                     # the small-argument range
    specials = {"log1p": [0.0, -0.0, -1.0, -2.0, float("inf"), float("nan")],
                "pow": [0.0, -0.0, -8.0, float("inf"), -float("inf"), float("nan")]}.get(
        op, [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30])
    x[:len(specials)] = torch.tensor(specials)
    y = torch.rand(n, generator=g) * 8 - 4
    y[:6] = torch.tensor([2.0, -3.0, 3.0, -0.5, 0.5, 0.0])
    return x, y


def _run_all(tgt):
    xs = [_inputs(op) for op in OPS]
    x = torch.stack([t[0] for t in xs])
    y = xs[0][1]
    o = torch.empty_like(x)
    with compiler.use_target(tgt), compiler.numerics("strict"):
        math_kernel[(x.shape[1] // 128,)](x, y, o, x.shape[1], BLOCK=128)   # 128: fits kunlun LM
    return x, y, o


def _run(op, tgt="cpu"):
    x, y, o = _run_all(tgt)
    k = OPS.index(op)
    return x[k], y, o[k]


# -- numpy emulations of the documented sequences -----------------------------------------------------
def _horner(coeffs, r):
    p = np.full_like(r, F(coeffs[0]))
    for k in coeffs[1:]:
        p = fma(p, r, F(k))
    return p


def _scale2(p, n):
    n = np.clip(n, -252, 254).astype(np.int32)
    h = n >> 1
    return ((p * pow2(h)).astype(F) * pow2(n - h)).astype(F)


def _copysign(mag, x):
    return (mag.view(np.int32) | (x.view(np.int32) & np.int32(-2 ** 31))).view(F)


def emu_expm1(x):
    n = np.floor(fma(x, F(1.4426950408889634), F(0.5)))
    r = fma(n, F(-0.693145751953125), x)
    r = fma(n, F(-1.428606765330187e-06), r)
    p = fma((r * r).astype(F), _horner(EXPM1_Q, r), r)
    t = pow2(np.clip(n, -30, 24))
    small = fma(t, p, (t - F(1)).astype(F))
    big = (_scale2((p + F(1)).astype(F), n) - F(1)).astype(F)
    y = np.where(n > 24, big, small)
    y = np.where(x > F(88.72283935546875), F(np.inf), y)
    y = np.where(x < F(-17.5), F(-1), y)
    y = np.where(x == 0, x, y)
    return np.where(np.isnan(x), x, y).astype(F)


def emu_log1p(x):
    s = (x / (x + F(2)).astype(F)).astype(F)
    near = (s * _horner([2 / 11, 2 / 9, 2 / 7, 2 / 5, 2 / 3, 2.0], (s * s).astype(F))).astype(F)
    u = (x + F(1)).astype(F)
    d = (u - F(1)).astype(F)
    y = (emu_log(u) * (x / d).astype(F)).astype(F)
    y = np.where((x > F(-0.2928932188134524)) & (x < F(0.41421356237309515)), near, y)
    return np.where(x == F(np.inf), x, y).astype(F)


def emu_tanh(x):
    e = emu_expm1((np.abs(x) * F(-2)).astype(F))
    return _copysign((-e / (e + F(2)).astype(F)).astype(F), x)


def emu_erf(x):
    a = np.abs(x)
    small = (a * _horner(ERF_SMALL, (a * a).astype(F))).astype(F)
    q = _horner(ERFC_MID, (F(1) / a).astype(F))
    hi = (a * a).astype(F)
    lo = fma(a, a, -hi)
    e = emu_exp(-hi)
    e = fma(-e, lo, e)
    mid = fma(-e, q, F(1))
    y = np.where(a < 1, small, mid)
    return _copysign(np.where(a >= 4, F(1), y).astype(F), x)


def emu_rint(x):
    a = np.abs(x)
    r = ((a + F(2 ** 23)).astype(F) - F(2 ** 23)).astype(F)
    return np.where(a < F(2 ** 23), _copysign(r, x), x).astype(F)


@pytest.mark.parametrize("op", ["tanh", "erf", "expm1", "log1p", "rint"])
def test_strict_sequence_equals_its_emulation(op):
    x, _, o = _run(op)
    with np.errstate(all="ignore"):
        want = {"tanh": emu_tanh, "erf": emu_erf, "expm1": emu_expm1, "log1p": emu_log1p, "rint": emu_rint}[op](
            x.numpy())
    nan = np.isnan(want)
    np.testing.assert_array_equal(o.numpy().view(np.int32)[~nan], want.view(np.int32)[~nan])
    assert np.isnan(o.numpy()[nan]).all()


def _ordered(t):
    b = t.view(torch.int32).long()
    return torch.where(b < 0, -(b & 0x7FFFFFFF), b)


# documented maximum errors (docs/numerics.md), in ulps of the fp32 result
MAX_ULP = {"tanh": 2, "erf": 2, "expm1": 1, "log1p": 2, "rint": 0, "pow": 8}


@pytest.mark.parametrize("op", OPS)
def test_strict_math_is_accurate_against_fp64(op):
    x, y, o = _run(op)
    ref = {"tanh": torch.tanh, "erf": torch.erf, "expm1": torch.expm1, "log1p": torch.log1p,
           "rint": torch.round}.get(op)
    want = (torch.pow(x.double(), y.double()) if op == "pow" else ref(x.double())).float()
    finite = torch.isfinite(want)
    assert torch.equal(torch.isnan(o), torch.isnan(want)), "NaN where the reference has none, or the reverse"
    assert torch.equal(o[~finite & ~torch.isnan(want)], want[~finite & ~torch.isnan(want)])
    ulps = (_ordered(o[finite]) - _ordered(want[finite])).abs().max().item()
    assert ulps <= MAX_ULP[op], f"{op}: {ulps} ulp"


def test_strict_pow_has_ieee_special_cases():
    vals = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, float("inf"), -float("inf"), float("nan"), -8.0, 1e-45]
    exps = [0.0, -0.0, 1.0, 2.0, 3.0, -1.0, -3.0, 0.5, -0.5, float("inf"), -float("inf"), float("nan"), 1 / 3, 1e10]
    x = torch.tensor([a for a in vals for _ in exps])
    y = torch.tensor([b for _ in vals for b in exps])
    xs = torch.ones(6, x.numel())
    xs[5] = x
    o = torch.empty_like(xs)
    with compiler.numerics("strict"):
        math_kernel[(2,)](xs, y, o, x.numel(), BLOCK=128)
    o = o[5]
    want = torch.pow(x.double(), y.double()).float()
    close = (o == want) | (torch.isnan(o) & torch.isnan(want)) | ((_ordered(o) - _ordered(want)).abs() <= 2)
    assert close.all(), [(a, b, g, w) for a, b, g, w, c in zip(x.tolist(), y.tolist(), o.tolist(), want.tolist(),
                                                                close.tolist()) if not c]


@pytest.mark.parametrize("tgt", on_targets("kunlun:xpu3", "gpu:interpret"))
def test_strict_math_bits_equal_cpus(tgt):
    _, _, ref = _run_all("cpu")
    _, _, got = _run_all(tgt)
    for k, op in enumerate(OPS):
        assert torch.equal(ref[k].view(torch.int32), got[k].view(torch.int32)), op
