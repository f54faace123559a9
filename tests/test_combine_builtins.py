"""Builtins built from the IR's own ops (compiler/builtins_combine.py) and the smaller constructs
Triton code uses, on cpu, gpu:interpret and kunlun:xpu3 against torch: tl.reduce with a combine
function (one order everywhere), xor_sum, histogram, gather, cat, broadcast, item, squeeze /
unsqueeze, expand_dims with negative axes, umulhi of 64-bit integers, interleave of scalars, `if`
on a single-element tensor, isinstance/hasattr on tensors, None slices."""
import functools
import operator

import pytest
import torch

from compiler import CompilationError, triton, use_target
from compiler.errors import KernelArgumentError
from compiler.triton import language as tl

pytestmark = pytest.mark.compile
TARGETS = ["cpu", "gpu:interpret", pytest.param("kunlun:xpu3", marks=pytest.mark.emulation)]
N = 16


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _argmin_combine(v1, i1, v2, i2):
    take = (v1 < v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(take, v1, v2), tl.where(take, i1, i2)


@triton.jit
def _first(a, b):   # associative, not commutative: the tree must keep the order
    return a


@triton.jit
def builtins_kernel(X, I, Z, ZI, H, G, C, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    idx = tl.load(I + o)
    rows = tl.load(X + (o[:, None] * 0 + o[None, :]))   # [N, N], every row x
    tl.store(Z + 0, tl.reduce(x, 0, _add))
    v, i = tl.reduce((x, o), 0, _argmin_combine)
    tl.store(Z + 1, v)
    tl.store(ZI + 0, i)
    tl.store(Z + 2, x.reduce(0, _first))
    tl.store(Z + 3 + o, tl.reduce(rows, 1, _add))                 # one value per row
    tl.store(ZI + 1, tl.xor_sum(idx, axis=0))
    tl.store(H + tl.arange(0, 8), tl.histogram(idx, 8, mask=o < N - 2))
    tl.store(G + o, tl.gather(x, idx, 0))
    g2 = tl.gather(rows * (o[:, None] + 1).to(tl.float32), idx[None, :] + o[:, None] * 0, 1)
    tl.store(G + N + o, tl.sum(g2, axis=0))
    tl.store(C + tl.arange(0, 2 * N), tl.cat(x, x * 2))
    c2 = tl.cat(rows, rows + 1, dim=1)                               # [N, 2N]
    tl.store(C + 2 * N + tl.arange(0, 2 * N), tl.sum(c2, axis=0))
    a, b = tl.broadcast(x[:, None], x[None, :])
    tl.store(Z + 3 + N, tl.sum(tl.sum(a * 2 - b, axis=1), axis=0))
    tl.store(Z + 4 + N, tl.load(X + tl.arange(0, 1)).item())
    t = tl.expand_dims(o, (0, -1))
    tl.static_assert(t.shape == [1, N, 1])
    u = tl.unsqueeze(o, -2)
    tl.static_assert(u.shape == [1, N])
    tl.static_assert(tl.squeeze(u, 0).shape == [N])
    s = x[None, None:None]
    tl.static_assert(s.shape == [1, N])
    tl.store(ZI + 2 + tl.arange(0, 2), tl.interleave(7, 9))
    first = tl.load(I + tl.arange(0, 1)) == 0
    if first:                                                        # a single-element tensor as a condition
        tl.store(ZI + 4, 1)
    if isinstance(x, tl.tensor) and hasattr(x, "dtype") and not hasattr(x, "no_such_thing"):
        tl.store(ZI + 5, 1)


def _expected(x, idx):
    rows = x.repeat(N, 1)
    return {
        "sum": x.sum(), "min": x.min(), "argmin": int(x.argmin()), "first": x[0], "rowsum": rows.sum(1),
        "xor": functools.reduce(operator.xor, idx.tolist()),
        "hist": torch.bincount(idx[:N - 2][idx[:N - 2] < 8], minlength=8)[:8],
        "gather": x[idx.long()],
        "gather2": (rows * (torch.arange(N)[:, None] + 1)).gather(1, idx.long().repeat(N, 1)).sum(0),
        "cat": torch.cat([x, x * 2]), "cat2": torch.cat([rows, rows + 1], 1).sum(0),
        "bcast": (x[:, None] * 2 - x[None, :]).sum(),
    }


@pytest.mark.parametrize("target", TARGETS)
def test_combine_builtins_match_torch(target):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-20, 20, (N,), generator=g).float()   # small integers: every sum exact
    x[5] = x[11] = x.min() - 3   # a tie for the argmin: the lowest index
    idx = torch.randint(0, N, (N,), generator=g, dtype=torch.int32)
    idx[0], idx[3] = 0, 99       # 99: counted in no bin; gathered nowhere (but stays in range for gather)
    gidx = idx.clone()
    gidx[3] = 2
    Z, ZI = torch.zeros(5 + N), torch.zeros(6, dtype=torch.int32)
    H, G, C = torch.zeros(8, dtype=torch.int32), torch.zeros(2 * N), torch.zeros(4 * N)
    with use_target(target):
        builtins_kernel[(1,)](x, gidx, Z, ZI, H, G, C, N=N)
    e = _expected(x, gidx)
    assert Z[0] == e["sum"] and Z[1] == e["min"] and ZI[0] == e["argmin"] == 5 and Z[2] == e["first"]
    assert torch.equal(Z[3:3 + N], e["rowsum"])
    assert ZI[1] == e["xor"]
    assert torch.equal(H, e["hist"].to(torch.int32))
    assert torch.equal(G[:N], e["gather"]) and torch.equal(G[N:], e["gather2"])
    assert torch.equal(C[:2 * N], e["cat"]) and torch.equal(C[2 * N:], e["cat2"])
    assert Z[3 + N] == e["bcast"] and Z[4 + N] == x[0]
    assert ZI[2:].tolist() == [7, 9, 1, 1]


@triton.jit
def _hist_range(X, H, N: tl.constexpr):
    tl.store(H + tl.arange(0, 4), tl.histogram(tl.load(X + tl.arange(0, N)), 4))


def test_histogram_ignores_values_outside_the_bins():
    x = torch.tensor([0, 1, 2, 3, 4, 4, 5, -1], dtype=torch.int32)
    h = torch.zeros(4, dtype=torch.int32)
    _hist_range[(1,)](x, h, N=8)
    assert h.tolist() == [1, 1, 1, 1]


@triton.jit
def _umulhi(X, Y, Z, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(Z + o, tl.umulhi(tl.load(X + o), tl.load(Y + o)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.uint64])
def test_umulhi_of_64_bit_integers(target, dtype):
    edges = [0, 1, 2, 3, 7, 255, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 0xDEADBEEFCAFEBABE, 2 ** 32, 2 ** 32 - 1,
             12345678901234567, 2 ** 62 + 5, 99, 2 ** 40]
    x = torch.tensor([v - 2 ** 64 if v >= 2 ** 63 else v for v in edges], dtype=torch.int64)
    y = torch.roll(x, 1)
    want = [((int(a) % 2 ** 64) * (int(b) % 2 ** 64)) >> 64 for a, b in zip(x.tolist(), y.tolist())]
    z = torch.zeros(16, dtype=torch.int64)
    with use_target(target):
        if target == "kunlun:xpu3" and dtype == torch.uint64:   # refused up front, naming the fix
            with pytest.raises(KernelArgumentError, match="uint64 tensor.*view\\(torch.int64\\)"):
                _umulhi[(1,)](x.view(dtype), y.view(dtype), z.view(dtype), N=16)
            return
        _umulhi[(1,)](x.view(dtype), y.view(dtype), z.view(dtype), N=16)
    assert [v % 2 ** 64 for v in z.tolist()] == want


def test_reduce_refuses_an_extent_that_is_not_a_power_of_two():
    @triton.jit
    def k(X, Z):
        tl.store(Z, tl.reduce(tl.zeros([6], tl.float32), 0, _add))

    with pytest.raises(CompilationError, match="power-of-two extent"):
        k[(1,)](torch.zeros(8), torch.zeros(1))


def test_slices_other_than_none_are_refused_with_triton_words():
    @triton.jit
    def k(X):
        X[10:]

    with pytest.raises(triton.TritonError, match="unsupported tensor index"):
        k[(1,)](torch.zeros(16))


@triton.jit
def _rows_by_address(Table, Z, N: tl.constexpr):
    o = tl.arange(0, N)
    row = tl.load(Table + tl.program_id(0)).to(tl.pointer_type(tl.float16))   # a table of uint64 addresses
    tl.store(Z + tl.program_id(0) * N + o, tl.load(row + o).to(tl.float32) * 2)


@pytest.mark.parametrize("target", TARGETS)
def test_pointer_from_an_integer(target):
    rows = [torch.arange(4, dtype=torch.float16) + 10 * i for i in range(3)]
    table = torch.tensor([r.data_ptr() for r in rows], dtype=torch.int64).view(torch.uint64)
    z = torch.zeros(12)
    with use_target(target):
        if target == "kunlun:xpu3":
            with pytest.raises(KernelArgumentError, match="'Table' is a uint64 tensor"):
                _rows_by_address[(3,)](table, z, N=4)
            with pytest.raises(CompilationError, match="pointer made from an integer"):   # int64 as it asks
                _rows_by_address[(3,)](table.view(torch.int64), z, N=4)
            return
        _rows_by_address[(3,)](table, z, N=4)
    assert z.tolist() == (torch.cat(rows).float() * 2).tolist()


@triton.jit
def _scalar_and_block_mask(X, Z, n, M, desc_unused: tl.tensor_descriptor = None, N: tl.constexpr = 4):
    pid = tl.program_id(0)
    o = tl.arange(0, N)
    mask = (pid < M) & (o < n)   # a scalar comparison & a block mask
    tl.store(Z + pid * N + o, tl.load(X + pid * N + o, mask=mask, other=0.0) + 1, mask=mask)


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_comparison_in_a_block_mask(target):
    """Triton's interpreter refuses such a mask as it computes it (int32 data); the generated source
    for gpu:interpret gives it bool data. The parameter annotated tl.tensor_descriptor is accepted."""
    x, z = torch.arange(12.0), torch.zeros(12)
    with use_target(target):
        _scalar_and_block_mask[(3,)](x, z, 3, 2)
    assert z.tolist() == [1.0, 2.0, 3.0, 0.0, 5.0, 6.0, 7.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@triton.jit
def _dot3(Q, K, O, O2, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, KK: tl.constexpr):
    b = tl.arange(0, B)
    m = tl.arange(0, M)
    n = tl.arange(0, N)
    kk = tl.arange(0, KK)
    q = tl.load(Q + b[:, None, None] * M * KK + m[None, :, None] * KK + kk[None, None, :])
    k = tl.load(K + b[:, None, None] * KK * N + kk[None, :, None] * N + n[None, None, :])
    tl.store(O + b[:, None, None] * M * N + m[None, :, None] * N + n[None, None, :], tl.dot(q, k))
    for i in tl.static_range(B):   # the same products as 2-D dots, batch element by batch element
        qi = tl.load(Q + i * M * KK + m[:, None] * KK + kk[None, :])
        ki = tl.load(K + i * KK * N + kk[:, None] * N + n[None, :])
        tl.store(O2 + i * M * N + m[:, None] * N + n[None, :], tl.dot(qi, ki))


@pytest.mark.parametrize("target", TARGETS)
def test_batched_dot_is_one_2d_dot_per_batch_element(target):
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(4, 16, 16, generator=g), torch.randn(4, 16, 16, generator=g)
    o, o2 = torch.zeros(4, 16, 16), torch.zeros(4, 16, 16)
    with use_target(target):
        _dot3[(1,)](q, k, o, o2, B=4, M=16, N=16, KK=16)
    assert torch.equal(o, o2)
    torch.testing.assert_close(o, q @ k)
