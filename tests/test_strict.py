"""Strict numerics: the cpu target's output equals, bitwise, an independent numpy emulation of
the operation order documented in docs/numerics.md."""
import numpy as np
import pytest
import torch

from compiler import CompilationError, kernel, language as tl, numerics

pytestmark = pytest.mark.compile

F = np.float32


def fma(a, b, c):
    # a*b is exact in float64; the sum rounds once to float64, then to float32. Double rounding can
    # differ from one correct rounding only with probability ~2^-29 per operation; the inputs below
    # are fixed (seeded), so the check is deterministic.
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F)


def pow2(k):
    return ((k.astype(np.int32) + 127) << 23).astype(np.int32).view(F)


def emu_exp(x):
    x = x.astype(F)
    n = np.floor(fma(x, F(1.4426950408889634), F(0.5)))
    r = fma(n, F(-0.693145751953125), x)
    r = fma(n, F(-1.428606765330187e-06), r)
    p = np.full_like(x, F(1 / 5040))
    for k in (1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0, 1.0):
        p = fma(p, r, F(k))
    n = np.clip(n, -252, 254).astype(np.int32)
    h = n >> 1
    y = (p * pow2(h)).astype(F) * pow2(n - h)
    y = np.where(x > F(88.72283935546875), F(np.inf), y)
    y = np.where(x < F(-103.97207641601562), F(0), y)
    return np.where(np.isnan(x), x, y).astype(F)


def emu_log(x):
    x = x.astype(F)
    tiny = x < F(1.1754943508222875e-38)
    xs = np.where(tiny, (x * F(8388608.0)).astype(F), x)
    bits = xs.view(np.int32)
    e = ((bits >> 23) & 255) - 127
    e = np.where(tiny, e - 23, e)
    m = ((bits & 0x7FFFFF) | 0x3F800000).astype(np.int32).view(F)
    big = m > F(1.4142135623730951)
    m = np.where(big, (m * F(0.5)).astype(F), m)
    e = np.where(big, e + 1, e)
    f = (m - F(1)).astype(F)
    s = (f / (f + F(2)).astype(F)).astype(F)
    s2 = (s * s).astype(F)
    p = np.full_like(x, F(2 / 11))
    for k in (2 / 9, 2 / 7, 2 / 5, 2 / 3, 2.0):
        p = fma(p, s2, F(k))
    lp = (s * p).astype(F)
    ef = e.astype(F)
    y = fma(ef, F(0.693145751953125), fma(ef, F(1.428606765330187e-06), lp))
    with np.errstate(invalid="ignore"):
        y = np.where(x == F(np.inf), x, y)
        y = np.where(x == 0, F(-np.inf), y)
        y = np.where(x < 0, F(np.nan), y)
    return np.where(np.isnan(x), x, y).astype(F)


def emu_pairwise(x, axis, op=np.add, identity=0.0):
    x = np.moveaxis(x.astype(F), axis, 0)
    n = x.shape[0]
    P = 1 << max(0, (n - 1).bit_length())
    t = np.full((P,) + x.shape[1:], F(identity), dtype=F)
    t[:n] = x
    s = P // 2
    while s >= 1:
        t[:s] = op(t[:s], t[s:2 * s]).astype(F)
        s //= 2
    return t[0]


@kernel
def unary(x_ptr, y_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    if OP == "exp":
        y = tl.exp(x)
    elif OP == "log":
        y = tl.log(x)
    elif OP == "sigmoid":
        y = tl.sigmoid(x)
    else:
        y = tl.rsqrt(x)
    tl.store(y_ptr + offs, y, mask=m)


def _inputs(op, n=4099):
    g = torch.Generator().manual_seed(7)
    if op in ("log", "rsqrt"):
        x = torch.rand(n, generator=g) * 1e4
        x[:6] = torch.tensor([0.0, float("inf"), -1.0, float("nan"), 1e-40, 1.0])
    else:
        x = torch.randn(n, generator=g) * 40
        x[:6] = torch.tensor([0.0, float("inf"), -float("inf"), float("nan"), 88.7, -103.0])
    return x


@pytest.mark.parametrize("op", ["exp", "log", "sigmoid", "rsqrt"])
def test_strict_math_equals_documented_sequence(op):
    x = _inputs(op)
    y = torch.empty_like(x)
    with numerics("strict"):
        unary[(5,)](x, y, x.numel(), OP=op, BLOCK=1024)
    xn = x.numpy()
    with np.errstate(all="ignore"):
        want = {"exp": emu_exp, "log": emu_log,
                "sigmoid": lambda v: (F(1) / (F(1) + emu_exp(-v)).astype(F)).astype(F),
                "rsqrt": lambda v: (F(1) / np.sqrt(v)).astype(F)}[op](xn)
    np.testing.assert_array_equal(y.numpy().view(np.int32)[~np.isnan(want)], want.view(np.int32)[~np.isnan(want)])
    assert np.isnan(y.numpy()[np.isnan(want)]).all()


def test_strict_math_is_accurate_against_fp64():
    x = _inputs("exp")[6:]
    y = torch.empty_like(x)
    with numerics("strict"):
        unary[(5,)](x, y, x.numel(), OP="exp", BLOCK=1024)
    ref = torch.exp(x.double()).float()
    ok = torch.isfinite(ref) & (ref != 0)
    ulps = (y[ok].view(torch.int32).long() - ref[ok].view(torch.int32).long()).abs().max().item()
    assert ulps <= 1


@kernel
def reduce2d(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, KIND: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    if KIND == "sum":
        r = tl.sum(x, axis=AXIS)
    else:
        r = tl.max(x, axis=AXIS)
    out = tl.arange(0, N if AXIS == 0 else M)
    tl.store(y_ptr + out, r)


@pytest.mark.parametrize("M,N", [(1, 5), (7, 3), (100, 33), (64, 64)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_strict_reductions_are_the_documented_pairwise_tree(M, N, axis, kind):
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(M * N))
    y = torch.empty(N if axis == 0 else M)
    with numerics("strict"):
        reduce2d[(1,)](x, y, M=M, N=N, AXIS=axis, KIND=kind)
    want = emu_pairwise(x.numpy(), axis, np.add if kind == "sum" else np.maximum, 0.0 if kind == "sum" else -np.inf)
    np.testing.assert_array_equal(y.numpy().view(np.int32), want.view(np.int32))


@kernel
def dot_tile(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_strict_dot_is_an_ascending_fma_chain(dtype):
    M, N, K = 9, 40, 33
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(M, K, generator=g).to(dtype), torch.randn(K, N, generator=g).to(dtype)
    c = torch.empty(M, N)
    with numerics("strict"):
        dot_tile[(1,)](a, b, c, M=M, N=N, K=K)
    an, bn = a.float().numpy(), b.float().numpy()
    acc = np.zeros((M, N), F)
    for k in range(K):
        acc = fma(an[:, k:k + 1], bn[k:k + 1, :], acc)
    np.testing.assert_array_equal(c.numpy().view(np.int32), acc.view(np.int32))


def test_policy_is_part_of_the_key_and_changes_the_code():
    x = torch.randn(8, 8)
    y = torch.empty(8)
    fast = reduce2d[(1,)](x, y, M=8, N=8, AXIS=1, KIND="sum")
    with numerics("strict"):
        strict = reduce2d[(1,)](x, y, M=8, N=8, AXIS=1, KIND="sum")
    assert fast.key != strict.key
    assert "reduction(+:" in fast.source and "reduction(+:" not in strict.source and "tree" in strict.source


@pytest.mark.no_toolchain
def test_sin_has_no_strict_lowering():
    @kernel
    def sine(x_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.store(x_ptr + r, tl.sin(tl.load(x_ptr + r)))

    with numerics("strict"), pytest.raises(CompilationError, match="no strict"):
        sine[(1,)](torch.zeros(8), BLOCK=8)


def test_strict_matmul_with_bias_relu_equals_emulation():
    import kernels
    g = torch.Generator().manual_seed(11)
    M, N, K = 7, 33, 130   # K not a multiple of BLOCK_K: padded products are fma(0, 0, acc)
    a, b, bias = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g), torch.randn(N, generator=g)
    with numerics("strict"):
        out = kernels.matmul(a, b, bias=bias, activation="relu")
    an, bn = a.numpy(), b.numpy()
    acc = np.zeros((M, N), F)
    for k in range(K):
        acc = fma(an[:, k:k + 1], bn[k:k + 1, :], acc)
    acc = np.maximum((acc + bias.numpy()[None, :]).astype(F), F(0))
    np.testing.assert_array_equal(out.numpy().view(np.int32), acc.view(np.int32))


@pytest.mark.parametrize("N", [100, 3000])
def test_strict_rms_norm_equals_emulation(N):
    import kernels
    g = torch.Generator().manual_seed(N)
    x, w = torch.randn(3, N, generator=g), torch.randn(N, generator=g)
    eps = 1e-6
    with numerics("strict"):
        y = kernels.rms_norm(x, w, eps)
    block = kernels.config_for("rms_norm", "cpu", N=N)["BLOCK"]
    for row in range(3):
        s = x[row].numpy()
        acc = np.zeros(block, F)
        for start in range(0, N, block):   # chunks in ascending order, element j of the tile
            chunk = np.zeros(block, F)
            part = s[start:start + block]
            chunk[:len(part)] = part
            acc = (acc + (chunk * chunk).astype(F)).astype(F)
        total = emu_pairwise(acc[None, :], 1)[0]
        rstd = F(1) / np.sqrt((total / F(N)).astype(F) + F(eps)).astype(F)
        want = ((s * rstd).astype(F) * w.numpy()).astype(F)
        np.testing.assert_array_equal(y[row].numpy().view(np.int32), want.view(np.int32))
