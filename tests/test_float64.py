"""float64: computed in fp64 on cpu and gpu (IEEE results equal to torch's, bit for bit), in fp32
on kunlun, which has no fp64 (as Kunlun's torch stacks do), with a warning at the first launch and
exact conversions between the fp64 memory and fp32 (compiler/fp64.py)."""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from compiler import CompilationError, kernel, numerics, use_target
from compiler import language as tl

pytestmark = pytest.mark.compile


@kernel
def ieee_ops(X, Y, Z, ZH, ZB, ZI, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    y = tl.load(Y + o)
    tl.store(Z + 0 * N + o, x * y + x / y)
    tl.store(Z + 1 * N + o, tl.sqrt(tl.abs(x)) - y)
    tl.store(Z + 2 * N + o, tl.fma(x, y, x))
    tl.store(Z + 3 * N + o, tl.maximum(x, y))
    tl.store(ZH + o, x.to(tl.float16))
    tl.store(ZB + o, x.to(tl.bfloat16))
    tl.store(ZI + o, (x * 1e12).to(tl.int64))


def _inputs(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 3
    y = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    x[0] = 1 + 2.0 ** -11 + 2.0 ** -40   # fp64 -> fp16: one rounding (via fp32 it would round to even)
    x[1] = 1 + 2.0 ** -8 + 2.0 ** -45    # the same for bf16
    x[2] = float("nan")
    return x, y


def _run(target, policy, x, y):
    n = x.numel()
    Z = torch.empty(4 * n, dtype=torch.float64)
    ZH, ZB = torch.empty(n, dtype=torch.float16), torch.empty(n, dtype=torch.bfloat16)
    ZI = torch.empty(n, dtype=torch.int64)
    with use_target(target), numerics(policy):
        ieee_ops[(1,)](x, y, Z, ZH, ZB, ZI, N=n)
    return Z.view(4, n), ZH, ZB, ZI


def _bf16_once(x):
    """fp64 -> bf16 rounded once: fp32 rounded to odd first (exact for the final rounding)."""
    d = x.numpy()
    f = d.astype(np.float32)
    inexact = (f.astype(np.float64) != d) & ~np.isnan(d)
    toward0 = np.where(np.abs(f.astype(np.float64)) > np.abs(d), np.nextafter(f, np.float32(0)), f)
    f = np.where(inexact, (toward0.view(np.uint32) | 1).view(np.float32), f)
    return torch.from_numpy(f).bfloat16()


def _same(a, b):
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("target", ["cpu", "gpu:interpret"])
@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_fp64_is_computed_in_fp64(target, policy):
    x, y = _inputs()
    Z, ZH, ZB, ZI = _run(target, policy, x, y)
    assert _same(Z[0], x * y + x / y)
    sq = torch.tensor([math.sqrt(abs(a)) if a == a else a for a in x.tolist()], dtype=torch.float64)
    assert _same(Z[1], sq - y)   # correctly rounded (math.sqrt; torch's vectorised sqrt may be 1 ulp off)
    fma = [float(Fraction(a) * Fraction(b) + Fraction(a)) if a == a else a for a, b in zip(x.tolist(), y.tolist())]
    assert _same(Z[2], torch.tensor(fma, dtype=torch.float64))   # x*y+x rounded once
    assert _same(Z[3], torch.fmax(x, y))
    # one rounding from fp64 (numpy's; torch's x.half() goes through fp32 and rounds twice)
    assert _same(ZH, torch.from_numpy(x.numpy().astype(np.float16)))
    assert _same(ZB, _bf16_once(x))
    assert ZI[3:].tolist() == (x[3:] * 1e12).to(torch.int64).tolist() and ZI[2] == 0   # NaN -> 0


def test_fp64_sum_and_dot_accumulate_in_fp64():
    @kernel
    def red(X, W, S, D, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(X + o)
        tl.store(S, tl.sum(x, axis=0))
        a = tl.load(X + o[:, None] * 0 + o[None, :])   # [N, N], rows equal to x
        w = tl.load(W + o[:, None] * N + o[None, :])
        tl.store(D + o[:, None] * N + o[None, :], tl.dot(a, w))

    n = 16
    x = torch.full((n,), 1.0, dtype=torch.float64) + 2.0 ** -40
    w = torch.eye(n, dtype=torch.float64) * (1 + 2.0 ** -45)
    s, d = torch.empty((), dtype=torch.float64), torch.empty(n, n, dtype=torch.float64)
    red[(1,)](x, w, s, d, N=n)
    assert s.item() == n * (1 + 2.0 ** -40)             # fp32 would give 16.0
    assert d[0, 0].item() == (1 + 2.0 ** -40) * (1 + 2.0 ** -45)


def test_strict_refuses_fp64_transcendentals():
    @kernel
    def ex(X, Z):
        tl.store(Z, tl.exp(tl.load(X)))

    with numerics("strict"), pytest.raises(CompilationError, match="exp of float64 has no strict"):
        ex[(1,)](torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64))
    z = torch.empty(1, dtype=torch.float64)
    ex[(1,)](torch.full((1,), 0.5, dtype=torch.float64), z)   # fast: the C library's exp of the double
    assert z.item() == torch.tensor(0.5, dtype=torch.float64).exp().item()


@kernel
def roundtrip(X, Y, F, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    tl.store(Y + o, x * 1.0)
    tl.store(F + o, x.to(tl.float32))


@pytest.mark.emulation
def test_kunlun_computes_fp64_in_fp32_and_says_so():
    special = [0.0, -0.0, 1.0, float("inf"), -float("inf"), float("nan"), 1e300, -1e300, 3.4028235677973366e38,
               3.4028236e38, 1.1754943508222875e-38, 1.1754942e-38, 1.401298464324817e-45, 7.006492321624085e-46,
               7.0064923216240854e-46 * 1.0000001, 1e-320, 1 + 2 ** -24, 1 + 3 * 2 ** -24, 1 + 2 ** -24 + 2 ** -50,
               2 ** -127 * (1 + 2 ** -23 + 2 ** -24)]
    rng = np.random.default_rng(0)
    x = np.concatenate([special, rng.standard_normal(1000) * np.exp(rng.uniform(-150, 150, 1000)),
                        rng.integers(0, 2 ** 63, 1004, dtype=np.uint64).view(np.float64)])
    X = torch.from_numpy(x)
    Y, F = torch.empty(len(x), dtype=torch.float64), torch.empty(len(x), dtype=torch.float32)
    with use_target("kunlun:xpu3"), pytest.warns(UserWarning, match="computes its float64 values in fp32"):
        roundtrip[(1,)](X, Y, F, N=len(x))
    with np.errstate(all="ignore"):
        want = x.astype(np.float32)   # each load rounds to the nearest fp32, ties to even
    got = F.numpy()
    assert (((got.view(np.uint32) == want.view(np.uint32))) | (np.isnan(got) & np.isnan(want))).all()
    back = want.astype(np.float64)    # each store widens exactly
    y = Y.numpy()
    assert (((y.view(np.uint64) == back.view(np.uint64))) | (np.isnan(y) & np.isnan(back))).all()


@pytest.mark.emulation
def test_kunlun_fp64_arithmetic_is_fp32_arithmetic():
    x, y = _inputs(32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Z, ZH, _, _ = _run("kunlun:xpu3", "fast", x, y)
    xf, yf = x.float(), y.float()
    assert _same(Z[0], (xf * yf + xf / yf).double())
    assert _same(ZH, xf.half())
