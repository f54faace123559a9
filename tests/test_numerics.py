"""Numerics of tilejit kernels (default target) against torch on random inputs.

Tolerances, and why:
- bitwise (rtol=atol=0) wherever the kernel performs one correctly rounded IEEE operation per
  output (+ - * min max compare, casts, where, integer ops, and sums/dots of integer-valued or
  dyadic data whose partial sums are all exact in fp32, so that the summation order cannot matter);
- ``SUM_TOL`` for sums/dots of random fp32 data: the reduction order of tilejit is fixed by the
  kernel and its config, but it is not torch's (MKL/pairwise), so the two differ by rounding;
- ``MATH_TOL`` for exp/exp2/log/log2/rsqrt/sigmoid: neither side is required to be correctly
  rounded (libm / vector polynomials / hardware approximations differ in the last ulps);
- fp16/bf16 outputs of fp32 computations that may themselves differ by an ulp: one ulp of the
  output type (torch.testing's defaults for those dtypes).
"""

from __future__ import annotations

import pytest
import torch

from compiler import kernel, language as tl

pytestmark = pytest.mark.compile

SIZES = (1, 17, 1000)
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
PAD = 7                     # extra columns after every output row: masked stores must not touch them
SUM_TOL = dict(rtol=1e-5, atol=1e-5)
MATH_TOL = dict(rtol=1e-5, atol=1e-6)
EXACT = dict(rtol=0, atol=0)


def cdiv(a, b):
    return (a + b - 1) // b


def npow2(n):
    return 1 << max(0, (n - 1).bit_length())


@pytest.fixture
def gen(request):
    """A generator seeded by the test id: inputs are random but reproducible per test."""
    import zlib
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def sentinel(shape, dtype):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)          # kernels below never write True to a pad
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, -77, dtype=dtype)


def rows_out(rows, n, dtype):
    """(rows, n + PAD) output buffer; kernels write rows with stride n + PAD, only [:, :n]."""
    return sentinel((rows, n + PAD), dtype)


def check_rows(out, n, want, what, **tol):
    pad = out[:, n:]
    assert torch.equal(pad, sentinel(pad.shape, out.dtype)) or \
        (out.dtype.is_floating_point and torch.isnan(pad).all()), f"{what}: a masked store wrote past n"
    for i in range(want.shape[0]):
        torch.testing.assert_close(out[i, :n], want[i].to(out.dtype), equal_nan=True,
                                   msg=lambda m, i=i: f"{what}, output row {i}: {m}", **tol)


def rand(gen, shape, dtype, lo=-100, hi=100):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 3).to(dtype)
    return torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64).to(dtype)


# ============================================================================================
# elementwise binary ops, every dtype; sizes 1/17/1000 with BLOCK=256 (ragged last block)
# ============================================================================================
@kernel
def float_binops_kernel(x_ptr, y_ptr, out_ptr, cmp_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    tl.store(out_ptr + 0 * stride + offs, x + y, mask=m)
    tl.store(out_ptr + 1 * stride + offs, x - y, mask=m)
    tl.store(out_ptr + 2 * stride + offs, x * y, mask=m)
    tl.store(out_ptr + 3 * stride + offs, x / y, mask=m)
    tl.store(out_ptr + 4 * stride + offs, tl.maximum(x, y), mask=m)
    tl.store(out_ptr + 5 * stride + offs, tl.minimum(x, y), mask=m)
    tl.store(out_ptr + 6 * stride + offs, -x, mask=m)
    tl.store(out_ptr + 7 * stride + offs, x * 2.0 + y, mask=m)      # 2x exact: one rounding
    tl.store(cmp_ptr + 0 * stride + offs, x < y, mask=m)
    tl.store(cmp_ptr + 1 * stride + offs, x <= y, mask=m)
    tl.store(cmp_ptr + 2 * stride + offs, x > y, mask=m)
    tl.store(cmp_ptr + 3 * stride + offs, x >= y, mask=m)
    tl.store(cmp_ptr + 4 * stride + offs, x == y, mask=m)
    tl.store(cmp_ptr + 5 * stride + offs, x != y, mask=m)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_binops(dtype, n, gen):
    x, y = rand(gen, n, dtype), rand(gen, n, dtype)
    x[::5] = y[::5]                                           # some equal pairs for == / <=
    out, cmp = rows_out(8, n, dtype), sentinel((6, n + PAD), torch.bool)
    cmp[:, n:] = False
    float_binops_kernel[(cdiv(n, 256),)](x, y, out, cmp, n, n + PAD, BLOCK=256)
    # torch computes half/bfloat16 ops in fp32 and rounds once: the same as any correct kernel.
    # Division: a "fast" target may use a reciprocal-based division (~1-2 ulp in fp32).
    want = torch.stack([x + y, x - y, x * y, x / y, torch.maximum(x, y), torch.minimum(x, y), -x,
                        x * 2.0 + y])
    check_rows(out[[0, 1, 2, 4, 5, 6, 7]], n, want[[0, 1, 2, 4, 5, 6, 7]], f"{dtype} binops", **EXACT)
    div_tol = dict(rtol=1e-6, atol=0) if dtype == torch.float32 else {}
    check_rows(out[3:4], n, want[3:4], f"{dtype} division", **div_tol)
    assert not cmp[:, n:].any(), "a masked comparison store wrote past n"
    want_cmp = torch.stack([x < y, x <= y, x > y, x >= y, x == y, x != y])
    assert torch.equal(cmp[:, :n], want_cmp)


@kernel
def int_binops_kernel(x_ptr, y_ptr, out_ptr, cmp_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m, other=1)
    tl.store(out_ptr + 0 * stride + offs, x + y, mask=m)
    tl.store(out_ptr + 1 * stride + offs, x - y, mask=m)
    tl.store(out_ptr + 2 * stride + offs, x * y, mask=m)
    tl.store(out_ptr + 3 * stride + offs, x // y, mask=m)
    tl.store(out_ptr + 4 * stride + offs, x % y, mask=m)
    tl.store(out_ptr + 5 * stride + offs, x & y, mask=m)
    tl.store(out_ptr + 6 * stride + offs, x | y, mask=m)
    tl.store(out_ptr + 7 * stride + offs, x ^ y, mask=m)
    tl.store(out_ptr + 8 * stride + offs, x << (y & 7), mask=m)
    tl.store(out_ptr + 9 * stride + offs, x >> (y & 7), mask=m)
    tl.store(out_ptr + 10 * stride + offs, tl.maximum(x, y), mask=m)
    tl.store(out_ptr + 11 * stride + offs, tl.minimum(x, y), mask=m)
    tl.store(out_ptr + 12 * stride + offs, -x + 3, mask=m)
    tl.store(cmp_ptr + 0 * stride + offs, x < y, mask=m)
    tl.store(cmp_ptr + 1 * stride + offs, x == y, mask=m)
    tl.store(cmp_ptr + 2 * stride + offs, x >= y, mask=m)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_int_binops(dtype, n, gen):
    hi = 30000 if dtype == torch.int32 else 2 ** 40
    x = rand(gen, n, dtype, -hi, hi)
    y = rand(gen, n, dtype, 1, 60)            # positive divisors: % and // agree in C and Python
    x[::7] = y[::7]
    out, cmp = rows_out(13, n, dtype), sentinel((3, n + PAD), torch.bool)
    cmp[:, n:] = False
    int_binops_kernel[(cdiv(n, 256),)](x, y, out, cmp, n, n + PAD, BLOCK=256)
    # Triton semantics for signed // and %: truncation toward zero (C), i.e. torch's "trunc"/fmod
    want = torch.stack([x + y, x - y, x * y, torch.div(x, y, rounding_mode="trunc"), torch.fmod(x, y),
                        x & y, x | y, x ^ y, x << (y & 7), x >> (y & 7), torch.maximum(x, y),
                        torch.minimum(x, y), -x + 3])
    check_rows(out, n, want, f"{dtype} binops", **EXACT)
    assert not cmp[:, n:].any(), "a masked comparison store wrote past n"
    assert torch.equal(cmp[:, :n], torch.stack([x < y, x == y, x >= y]))


@kernel
def bool_ops_kernel(x_ptr, y_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + 0 * stride + offs, x & y, mask=m)
    tl.store(out_ptr + 1 * stride + offs, x | y, mask=m)
    tl.store(out_ptr + 2 * stride + offs, x ^ y, mask=m)
    tl.store(out_ptr + 3 * stride + offs, x == y, mask=m)
    tl.store(out_ptr + 4 * stride + offs, x != y, mask=m)


@pytest.mark.parametrize("n", SIZES)
def test_bool_ops(n, gen):
    x, y = rand(gen, n, torch.bool), rand(gen, n, torch.bool)
    out = torch.zeros((5, n + PAD), dtype=torch.bool)
    bool_ops_kernel[(cdiv(n, 256),)](x, y, out, n, n + PAD, BLOCK=256)
    assert not out[:, n:].any(), "a masked store wrote past n"
    assert torch.equal(out[:, :n], torch.stack([x & y, x | y, x ^ y, x == y, x != y]))


# ============================================================================================
# masked loads: `other` fills the masked lanes; a whole padded block is stored unmasked
# ============================================================================================
@kernel
def masked_load_kernel(x_ptr, out_ptr, n, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=OTHER)
    tl.store(out_ptr + offs, x)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_masked_load_other(dtype, n, gen):
    x = rand(gen, n, dtype)
    grid = cdiv(n, 64)
    out = sentinel(grid * 64, dtype)
    other = -5.0 if dtype.is_floating_point else -5
    masked_load_kernel[(grid,)](x, out, n, OTHER=other, BLOCK=64)
    want = torch.cat([x, torch.full((grid * 64 - n,), other, dtype=dtype)])
    assert torch.equal(out, want)


# ============================================================================================
# unary math in fp32 (and fp16/bf16 computed in fp32), against float64 torch
# ============================================================================================
@kernel
def unary_math_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0).to(tl.float32)
    ax = tl.abs(x) + 0.0625
    ot = out_ptr.dtype.element_ty
    tl.store(out_ptr + 0 * stride + offs, tl.exp(x).to(ot), mask=m)
    tl.store(out_ptr + 1 * stride + offs, tl.exp2(x).to(ot), mask=m)
    tl.store(out_ptr + 2 * stride + offs, tl.log(ax).to(ot), mask=m)
    tl.store(out_ptr + 3 * stride + offs, tl.log2(ax).to(ot), mask=m)
    tl.store(out_ptr + 4 * stride + offs, tl.rsqrt(ax).to(ot), mask=m)
    tl.store(out_ptr + 5 * stride + offs, tl.sigmoid(x).to(ot), mask=m)
    tl.store(out_ptr + 6 * stride + offs, tl.sqrt(ax).to(ot), mask=m)
    tl.store(out_ptr + 7 * stride + offs, tl.abs(x).to(ot), mask=m)
    tl.store(out_ptr + 8 * stride + offs, tl.fma(x, ax, -x).to(ot), mask=m)


@pytest.mark.parametrize("n", (17, 1000))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_unary_math(dtype, n, gen):
    x = rand(gen, n, dtype)
    out = rows_out(9, n, dtype)
    unary_math_kernel[(cdiv(n, 256),)](x, out, n, n + PAD, BLOCK=256)
    xd = x.double()
    ad = xd.abs() + 0.0625
    want = torch.stack([xd.exp(), xd.exp2(), ad.log(), ad.log2(), ad.rsqrt(), torch.sigmoid(xd),
                        ad.sqrt(), xd.abs(), xd * ad - xd])
    if dtype == torch.float32:
        check_rows(out[:6], n, want[:6], "fp32 transcendental", **MATH_TOL)
        # sqrt is correctly rounded in IEEE; a fast target may still be an ulp off
        check_rows(out[6:7], n, want[6:7], "fp32 sqrt", rtol=2.5e-7, atol=0)
        check_rows(out[7:8], n, want[7:8], "fp32 abs", **EXACT)
        # fma rounds once; a non-fused a*b+c (two roundings) is still within ~1e-6 here
        check_rows(out[8:9], n, want[8:9], "fp32 fma", rtol=1e-6, atol=1e-6)
    else:
        # fp32 result rounded to fp16/bf16: at most one ulp of the output type apart
        check_rows(out, n, want, f"{dtype} math")


# ============================================================================================
# casts: float -> int truncation, int -> float, fp32 <-> fp16/bf16, -> bool, bool -> float
# ============================================================================================
@kernel
def cast_kernel(f_ptr, i_ptr, l_ptr, f2i_ptr, f2l_ptr, h2i_ptr, i2f_ptr, l2f_ptr, i2h_ptr, f2h_ptr, f2b_ptr,
                h2f_ptr, b2f_ptr, tobool_ptr, b2f_ptr2, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    f = tl.load(f_ptr + offs, mask=m, other=0.0)
    i = tl.load(i_ptr + offs, mask=m, other=0)
    big = tl.load(l_ptr + offs, mask=m, other=0)
    tl.store(f2i_ptr + offs, f.to(tl.int32), mask=m)
    tl.store(f2l_ptr + offs, (f * 1000.0).to(tl.int64), mask=m)
    tl.store(h2i_ptr + offs, f.to(tl.float16).to(tl.int32), mask=m)
    tl.store(i2f_ptr + offs, i.to(tl.float32), mask=m)
    tl.store(l2f_ptr + offs, big.to(tl.float32), mask=m)
    tl.store(i2h_ptr + offs, i.to(tl.float16), mask=m)
    h = f.to(tl.float16)
    b = f.to(tl.bfloat16)
    tl.store(f2h_ptr + offs, h, mask=m)
    tl.store(f2b_ptr + offs, b, mask=m)
    tl.store(h2f_ptr + offs, h.to(tl.float32), mask=m)
    tl.store(b2f_ptr + offs, b.to(tl.float32), mask=m)
    tl.store(tobool_ptr + offs, (i % 3).to(tl.int1), mask=m)
    tl.store(b2f_ptr2 + offs, (f > 0).to(tl.float32) + (i < 0).to(tl.int32).to(tl.float32) * 2.0, mask=m)


@pytest.mark.parametrize("n", SIZES)
def test_casts(n, gen):
    mag = 10.0 ** (torch.rand(n, generator=gen) * 9 - 5)       # 1e-5 .. 1e4 (fp16 overflows > 65504)
    f = torch.randn(n, generator=gen) * mag
    f[:4] = torch.tensor([-2.7, 2.7, -0.5, 70000.0])[:n]
    i = torch.randint(-5000, 5000, (n,), generator=gen, dtype=torch.int32)
    big = torch.randint(-2 ** 40, 2 ** 40, (n,), generator=gen, dtype=torch.int64)
    outs = {k: sentinel(n, dt) for k, dt in [
        ("f2i", torch.int32), ("f2l", torch.int64), ("h2i", torch.int32), ("i2f", torch.float32),
        ("l2f", torch.float32), ("i2h", torch.float16), ("f2h", torch.float16), ("f2b", torch.bfloat16),
        ("h2f", torch.float32), ("b2f", torch.float32), ("tobool", torch.bool), ("b2f2", torch.float32)]}
    # keep float -> int conversions inside the target types' ranges (out of range is UB in C)
    f_in = torch.where(f.abs() < 60000, f, torch.sign(f) * 1000.5)
    cast_kernel[(cdiv(n, 128),)](f_in, i, big, *outs.values(), n, BLOCK=128)
    want = {
        "f2i": f_in.to(torch.int32),                        # truncation toward zero
        "f2l": (f_in * 1000.0).to(torch.int64),
        "h2i": f_in.half().to(torch.int32),
        "i2f": i.float(), "l2f": big.float(),                # round to nearest even
        "i2h": i.half(),
        "f2h": f_in.half(), "f2b": f_in.bfloat16(),
        "h2f": f_in.half().float(), "b2f": f_in.bfloat16().float(),
        "tobool": (i % 3) != 0,
        "b2f2": (f_in > 0).float() + (i < 0).float() * 2.0,
    }
    for k, w in want.items():
        torch.testing.assert_close(outs[k], w, rtol=0, atol=0, msg=lambda m, k=k: f"cast {k}: {m}")


@kernel
def downcast_kernel(f_ptr, h_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    f = tl.load(f_ptr + offs, mask=m)
    tl.store(h_ptr + offs, f.to(tl.float16), mask=m)
    tl.store(b_ptr + offs, f.to(h_ptr.dtype.element_ty).to(tl.float32).to(tl.bfloat16), mask=m)


@pytest.mark.parametrize("n", (17, 1000))
def test_cast_overflow_to_inf(n, gen):
    """fp32 -> fp16 beyond 65504 rounds to +-inf (IEEE round to nearest even), as torch does;
    inf / nan survive the round trip through fp32 into bf16."""
    f = torch.randn(n, generator=gen) * 1e5
    f[:3] = torch.tensor([float("inf"), float("-inf"), 65519.0])   # 65519 -> 65504, 65520 -> inf
    h, b = sentinel(n, torch.float16), sentinel(n, torch.bfloat16)
    downcast_kernel[(cdiv(n, 128),)](f, h, b, n, BLOCK=128)
    assert torch.equal(h, f.half())
    assert torch.equal(b, f.half().float().bfloat16())


# ============================================================================================
# reductions along each axis of a masked 2-D tile
# ============================================================================================
@kernel
def reduce_kernel(x_ptr, out_ptr, M, N, stride, FLOAT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride + rn[None, :], mask=mask, other=0)
    if FLOAT:
        acc = x.to(tl.float32)                                # fp16/bf16/fp32 sum in fp32
    else:
        acc = x
    # out rows: sum0, max0, min0 (length N) then sum1, max1, min1 (length M), stride BM + BN
    S = BM + BN
    tl.store(out_ptr + 0 * S + rn, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=rn < N)
    xl = tl.where(mask, x, -10000)
    xh = tl.where(mask, x, 10000)
    tl.store(out_ptr + 1 * S + rn, tl.max(xl, axis=0), mask=rn < N)
    tl.store(out_ptr + 2 * S + rn, tl.min(xh, axis=0), mask=rn < N)
    tl.store(out_ptr + 3 * S + rm, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=rm < M)
    tl.store(out_ptr + 4 * S + rm, tl.max(xl, axis=1), mask=rm < M)
    tl.store(out_ptr + 5 * S + rm, tl.min(xh, axis=1), mask=rm < M)


@pytest.mark.parametrize("shape", [(1, 1), (17, 5), (33, 64)], ids=str)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int32, torch.int64), ids=str)
@pytest.mark.parametrize("values", ("integers", "randn"))
def test_reductions_2d(dtype, shape, values, gen):
    if values == "randn" and not dtype.is_floating_point:
        pytest.skip("integers only")
    M, N = shape
    BM, BN = npow2(M), npow2(N)
    x = rand(gen, (M, N), dtype) if values == "randn" else \
        torch.randint(-100, 100, (M, N), generator=gen).to(dtype)
    out = sentinel((6, BM + BN), dtype)
    reduce_kernel[(1,)](x, out, M, N, x.stride(0), FLOAT=dtype.is_floating_point, BM=BM, BN=BN)
    xf = x.double()
    sums_tol = EXACT if values == "integers" else SUM_TOL
    if dtype == torch.bfloat16:
        sums_tol = {}                                  # fp32 sum rounded once to bf16
    for row, want, tol in [(0, xf.sum(0), sums_tol), (1, x.amax(0), EXACT), (2, x.amin(0), EXACT),
                           (3, xf.sum(1), sums_tol), (4, x.amax(1), EXACT), (5, x.amin(1), EXACT)]:
        k = N if row < 3 else M
        torch.testing.assert_close(out[row, :k], want.to(dtype), msg=lambda m, r=row: f"row {r}: {m}", **tol)
        pad = out[row, k:]
        assert torch.equal(pad, sentinel(pad.shape, dtype)) or torch.isnan(pad).all(), "masked store leaked"


# ============================================================================================
# tl.dot: fp16/bf16 inputs, fp32 accumulation over a K loop, ragged M/N/K
# ============================================================================================
@kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn,
                    mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _matmul(a, b, out_dtype, BM=32, BN=32, BK=16):
    M, K = a.shape
    N = b.shape[1]
    c = sentinel((M, N), out_dtype)
    matmul_kernel[(cdiv(M, BM), cdiv(N, BN))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                               b.stride(1), c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK)
    return c


@pytest.mark.parametrize("mnk", [(16, 16, 16), (17, 33, 40), (64, 48, 96)], ids=str)
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_dot_low_precision_inputs_fp32_accumulation(dtype, mnk, gen):
    M, N, K = mnk
    a = torch.randn((M, K), generator=gen).to(dtype)
    b = torch.randn((N, K), generator=gen).to(dtype).t()          # column-major B
    c = _matmul(a, b, torch.float32)
    # products of fp16/bf16 values are exact in fp32; only the summation order differs from torch
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=2e-5)
    # accumulation really is fp32: an fp16/bf16 accumulator would be ~1e-3 off
    c16 = _matmul(a, b, dtype)
    torch.testing.assert_close(c16, (a.double() @ b.double()).to(dtype))


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_dot_exact_on_dyadic_inputs(dtype, gen):
    """Values k/8, |k| <= 16: every product and partial sum is exact in fp32, so the result must
    be bitwise torch's whatever the summation order - and would not be with an fp16 accumulator
    (sums reach ~hundreds with 1/64 resolution: 15 significant bits)."""
    M, N, K = 40, 24, 200
    a = (torch.randint(-16, 17, (M, K), generator=gen) / 8).to(dtype)
    b = (torch.randint(-16, 17, (K, N), generator=gen) / 8).to(dtype)
    c = _matmul(a, b, torch.float32)
    assert torch.equal(c, a.double().matmul(b.double()).float())


# ============================================================================================
# loops: carried tiles (float / int), carried scalars, nested loops
# ============================================================================================
@kernel
def loop_stats_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    cnt = tl.zeros([BLOCK], dtype=tl.int32)
    n_iter = 0
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        acc += x
        sq = sq + x * x
        mx = tl.maximum(mx, tl.where(mask, x, float("-inf")))
        cnt += (x > 0).to(tl.int32)
        n_iter += 1
        total = total + tl.sum(x, axis=0)
    tl.store(out_ptr + row * 6 + 0, tl.sum(acc, axis=0))
    tl.store(out_ptr + row * 6 + 1, tl.sum(sq, axis=0))
    tl.store(out_ptr + row * 6 + 2, tl.max(mx, axis=0))
    tl.store(out_ptr + row * 6 + 3, tl.sum(cnt, axis=0).to(tl.float32))
    tl.store(out_ptr + row * 6 + 4, n_iter * 1.0)
    tl.store(out_ptr + row * 6 + 5, total)


@pytest.mark.parametrize("cols", SIZES)
def test_loop_carried_tiles_and_scalars(cols, gen):
    rows, BLOCK = 3, 64
    x = torch.randint(-20, 20, (rows, cols), generator=gen).float()     # integer-valued: exact sums
    out = sentinel((rows, 6), torch.float32)
    loop_stats_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=BLOCK)
    want = torch.stack([x.sum(1), (x * x).sum(1), x.amax(1), (x > 0).sum(1).float(),
                        torch.full((rows,), float(cdiv(cols, BLOCK))), x.sum(1)], dim=1)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@kernel
def nested_loop_kernel(x_ptr, out_ptr, R, C, BLOCK: tl.constexpr):
    # out[j] = sum_r sum_c x[r, c] * (r + 1) over column chunks, carried through both loops
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(R):
        for c0 in range(0, C, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + r * C + cols, mask=cols < C, other=0.0)
            acc += x * (r + 1)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (5, 100)], ids=str)
def test_nested_loops(shape, gen):
    R, C = shape
    BLOCK = 32
    x = torch.randint(-8, 8, (R, C), generator=gen).float()
    out = sentinel(BLOCK, torch.float32)
    nested_loop_kernel[(1,)](x, out, R, C, BLOCK=BLOCK)
    w = x * torch.arange(1, R + 1).float()[:, None]
    padded = torch.zeros(R, cdiv(C, BLOCK) * BLOCK)
    padded[:, :C] = w
    want = padded.reshape(R, -1, BLOCK).sum((0, 1))
    assert torch.equal(out, want)


# ============================================================================================
# broadcasting and where
# ============================================================================================
@kernel
def broadcast_where_kernel(x_ptr, y_ptr, s_ptr, keep_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = tl.load(y_ptr + rn, mask=rn < N, other=0.0)
    s = tl.load(s_ptr)                                           # scalar broadcast
    keep = tl.load(keep_ptr + rm, mask=rm < M, other=0)          # bool per row
    t = x[:, None] * s + y[None, :]                               # [BM, 1] op [1, BN]
    t = tl.where(t > 0, t, t * 0.5)                               # tile / tile
    t = tl.where(keep[:, None], t, -1.0)                          # row mask broadcast, scalar other
    t = tl.where((rn[None, :] % 4) == 0, 0.0, t)                  # scalar then tile
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], t, mask=mask)


@pytest.mark.parametrize("shape", [(1, 1), (17, 5), (100, 33)], ids=str)
def test_broadcast_and_where(shape, gen):
    M, N = shape
    x, y = rand(gen, M, torch.float32), rand(gen, N, torch.float32)
    s = torch.tensor([1.5])
    keep = torch.rand(M, generator=gen) < 0.7
    out = sentinel((M, N), torch.float32)
    broadcast_where_kernel[(cdiv(M, 32),)](x, y, s, keep, out, M, N, BM=32, BN=npow2(N))
    t = x[:, None] * 1.5 + y[None, :]
    t = torch.where(t > 0, t, t * 0.5)
    t = torch.where(keep[:, None], t, -1.0)
    t = torch.where(torch.arange(N)[None, :] % 4 == 0, 0.0, t)
    # x*s+y may be contracted to an fma: allow ~1 ulp
    torch.testing.assert_close(out, t, rtol=1e-6, atol=1e-6)


@kernel
def where_dtypes_kernel(c_ptr, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    c = tl.load(c_ptr + offs, mask=m, other=0)
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, tl.where(c, x, y), mask=m)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOATS + INTS + (torch.bool,), ids=str)
def test_where_every_dtype(dtype, n, gen):
    c = rand(gen, n, torch.bool)
    x, y = rand(gen, n, dtype), rand(gen, n, dtype)
    out = sentinel(n, dtype)
    where_dtypes_kernel[(cdiv(n, 256),)](c, x, y, out, n, BLOCK=256)
    assert torch.equal(out, torch.where(c, x, y))


# ============================================================================================
# a chain of fp16/bf16 arithmetic: Triton rounds every op to the tile dtype, tilejit's contract
# rounds once at the store - both are within a couple of ulps of the fp32-computed result
# ============================================================================================
@kernel
def lowp_chain_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, (x * y + x) / (tl.abs(y) + 1.0), mask=m)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_low_precision_chain(dtype, gen):
    n = 1000
    x, y = rand(gen, n, dtype), rand(gen, n, dtype)
    out = sentinel(n, dtype)
    lowp_chain_kernel[(cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    xf, yf = x.float(), y.float()
    want = (xf * yf + xf) / (yf.abs() + 1.0)
    # error bound of the per-op-rounded evaluation: a few ulps of each intermediate's magnitude
    # (x*y + x can cancel, so the bound is relative to |x*y| + |x|, not to the result)
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    bound = 3 * ulp * ((xf * yf).abs() + xf.abs()) / (yf.abs() + 1.0) + 1e-6
    err = (out.float() - want).abs()
    assert (err <= bound).all(), f"max error {err.max()} / bound {bound[err.argmax()]} at {err.argmax()}"
