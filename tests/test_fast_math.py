"""The fast policy's exp and exp2 on cpu (compiler/fast_math.py, docs/numerics.md): the output
equals an independent numpy emulation of the documented sequence bitwise, and is within 1 ulp of
fp64 over the whole fp32 range, subnormal results, overflow and NaN included."""
import numpy as np
import pytest
import torch

from compiler import kernel, language as tl, numerics
from test_strict import F, fma, pow2

pytestmark = pytest.mark.compile


@kernel
def exps(x_ptr, e_ptr, e2_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(e_ptr + offs, tl.exp(x), mask=m)
    tl.store(e2_ptr + offs, tl.math.exp2(x), mask=m)


ROUNDER = F(12582912.0)


def _scale(p, t):
    n = t.view(np.int32) - np.int32(0x4B400000)
    h = n >> 1
    return ((p * pow2(h)).astype(F) * pow2(n - h)).astype(F)


def _poly(r):
    p = np.full_like(r, F(1 / 5040))
    for k in (1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0, 1.0):
        p = fma(p, r, F(k))
    return p


def emu_fast_exp(x):
    x = np.where(x < F(-104), F(-104), x).astype(F)
    x = np.where(x > F(89), F(89), x).astype(F)
    t = fma(x, F(1.4426950408889634), ROUNDER)
    n = (t - ROUNDER).astype(F)
    return _scale(_poly(fma(n, F(-1.428606765330187e-06), fma(n, F(-0.693145751953125), x))), t)


def emu_fast_exp2(x):
    x = np.where(x < F(-151), F(-151), x).astype(F)
    x = np.where(x > F(129), F(129), x).astype(F)
    t = (x + ROUNDER).astype(F)
    r = ((x - (t - ROUNDER).astype(F)).astype(F) * F(0.6931471805599453)).astype(F)
    return _scale(_poly(r), t)


def _inputs():
    g = torch.Generator().manual_seed(5)
    x = torch.cat([torch.rand(40000, generator=g) * 300 - 160, torch.randn(8000, generator=g) * 4,
                   torch.rand(4000, generator=g) * 70 - 160])   # results down to the subnormals
    specials = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 88.72283935546875, 88.72284698486328, 89.0,
                -87.33654022216797, -103.97207641601562, -104.0, 128.0, 127.99999237060547, -126.0, -149.0,
                -150.0, -151.0, 1e-30, -1e-30]
    x[:len(specials)] = torch.tensor(specials)
    return x


def _run(policy="fast"):
    x = _inputs()
    e, e2 = torch.empty_like(x), torch.empty_like(x)
    with numerics(policy):
        exps[(-(-x.numel() // 1024),)](x, e, e2, x.numel(), BLOCK=1024)
    return x, e, e2


def test_fast_exp_and_exp2_equal_their_documented_sequence():
    x, e, e2 = _run()
    with np.errstate(all="ignore"):
        for got, emu in ((e, emu_fast_exp), (e2, emu_fast_exp2)):
            want = emu(x.numpy())
            nan = np.isnan(want)
            np.testing.assert_array_equal(got.numpy().view(np.int32)[~nan], want.view(np.int32)[~nan])
            assert np.isnan(got.numpy()[nan]).all()


def _ordered(t):
    b = t.view(torch.int32).long()
    return torch.where(b < 0, -(b & 0x7FFFFFFF), b)


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_exp_and_exp2_are_within_one_ulp_of_fp64_everywhere(policy):
    """Subnormal results, the last finite ones, overflow to inf and underflow to 0 included; NaN
    stays NaN."""
    x, e, e2 = _run(policy)
    for got, ref in ((e, torch.exp(x.double()).float()), (e2, torch.exp2(x.double()).float())):
        assert torch.equal(torch.isnan(got), torch.isnan(ref))
        keep = ~torch.isnan(ref)
        assert (_ordered(got[keep]) - _ordered(ref[keep])).abs().max().item() <= 1
