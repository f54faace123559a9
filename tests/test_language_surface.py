"""The everyday Triton surface on every target (cpu, kunlun:xpu3 host emulation, gpu:interpret):
kernels written against `triton.language` as real ones are (tl.tensor annotations, cast/bitcast,
.to() on scalar arguments, tl.math and libdevice, tl.range with loop options, tl.debug_barrier,
constexpr globals and comparisons, a dtype as a constexpr, pointer reassignment, int64 program
ids), shape builtins (reshape/view/join/split/interleave), cumsum, argmax/argmin and max with
indices, umulhi, block pointers, tensor descriptors and fp8 storage, checked against torch."""
from __future__ import annotations

import pytest
from tiers import on_targets
import torch
import triton.language as ttl
from triton.language.extra import libdevice

import compiler
import targets.kunlun
from compiler import kernel
from compiler import language as tl
from compiler.target import register_target

pytestmark = pytest.mark.compile

register_target("kunlun", targets.kunlun.TARGET)
TARGETS = on_targets("cpu", "kunlun:xpu3", "gpu:interpret")
MODE_SCALE: ttl.constexpr = ttl.constexpr(1)        # module constexprs, as real kernels hold them
LOG2E = ttl.constexpr(1.4426950408889634)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# -- a Liger-style row kernel, written against triton.language -----------------------------------
@kernel
def row_kernel(x_ptr, y_ptr, stride, n_cols, eps, gain: float, n_valid: int, MODE: ttl.constexpr,
               REDUCE: ttl.constexpr, SMOOTH: ttl.constexpr, OUT: ttl.constexpr, BLOCK: ttl.constexpr) -> ttl.tensor:
    pid = ttl.program_id(0).to(ttl.int64)
    x_ptr += pid * stride
    y_ptr += pid * stride
    acc = ttl.zeros((BLOCK,), ttl.float32)
    for c in ttl.range(0, n_cols, BLOCK, num_stages=2, loop_unroll_factor=1):
        offs = c + ttl.arange(0, BLOCK)
        x = ttl.load(x_ptr + offs, mask=offs < n_cols, other=0.0, cache_modifier=".ca").cast(ttl.float32)
        acc += x * x
    ttl.debug_barrier()
    rms = libdevice.rsqrt(ttl.sum(acc, axis=0) / n_cols + eps.to(ttl.float32))
    if MODE == MODE_SCALE:
        rms = rms * gain
    if REDUCE == "mean":
        rms = rms / n_valid
    if SMOOTH > 0.0:
        rms = rms * (1.0 - SMOOTH)
    for c in range(0, n_cols, BLOCK):
        offs = c + ttl.arange(0, BLOCK)
        x = ttl.load(x_ptr + offs, mask=offs < n_cols, other=0.0).to(ttl.float32)
        y = ttl.math.exp2(ttl.log2(ttl.maximum(ttl.abs(x * rms), 1e-30)) * 1.0) * ttl.where(x < 0, -1.0, 1.0)
        ttl.store(y_ptr + offs, y.to(OUT), mask=offs < n_cols)


@pytest.mark.parametrize("tgt", TARGETS)
def test_triton_style_row_kernel(tgt):
    x = torch.randn(3, 50, generator=_gen(1)).half()
    y = torch.zeros_like(x)
    with compiler.use_target(tgt):
        row_kernel[(3,)](x, y, x.stride(0), 50, 1e-5, 2.0, 4, 1, "mean", 0.5, ttl.float16, BLOCK=16)
    xf = x.float()
    ref = xf * torch.rsqrt(xf.pow(2).mean(1, keepdim=True) + 1e-5) * 2.0 / 4 * 0.5
    torch.testing.assert_close(y.float(), ref.half().float(), rtol=2e-3, atol=1e-4)


@pytest.mark.no_toolchain
def test_tl_range_options_reach_the_gpu_source_only():
    x = torch.zeros(1, 16)
    with compiler.use_target("gpu:interpret"), compiler.render_only() as seen:
        row_kernel[(1,)](x, x, 16, 16, 1e-5, 1.0, 1, 0, "sum", 0.0, ttl.float32, BLOCK=16)
    assert "tl.range(0, " in seen[0].source and "num_stages=2" in seen[0].source
    assert "tl.debug_barrier()" in seen[0].source
    with compiler.use_target("cpu"), compiler.render_only() as seen:
        row_kernel[(1,)](x, x, 16, 16, 1e-5, 1.0, 1, 0, "sum", 0.0, ttl.float32, BLOCK=16)
    assert "num_stages" not in seen[0].source


# -- math: tl.math, libdevice, casts -------------------------------------------------------------
@kernel
def math_kernel(x_ptr, o_ptr, i_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    outs = (libdevice.tanh(x), tl.math.erf(x), libdevice.pow(x + 2.0, 1.5), libdevice.log1p(x),
            libdevice.expm1(x), libdevice.fast_expf(x), libdevice.rint(x * 4.0), libdevice.trunc(x * 3.0),
            x ** 3, libdevice.copysign(2.0, x), tl.math.fdiv(x, 3.0), libdevice.fmod(x * 10.0, 3.0))
    for k in tl.static_range(len(outs)):
        tl.store(o_ptr + k * N + offs, outs[k])
    bits = x.to(tl.int32, bitcast=True)
    tl.store(i_ptr + offs, bits)
    tl.store(i_ptr + N + offs, tl.cast(x.cast(tl.float16), tl.int16, bitcast=True).to(tl.int32))
    tl.store(i_ptr + 2 * N + offs, tl.umulhi(bits, bits * 3 + 1))
    tl.store(i_ptr + 3 * N + offs, libdevice.isnan(x / x).to(tl.int32) + 2 * libdevice.signbit(x).to(tl.int32))


@pytest.mark.parametrize("tgt", TARGETS)
@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_math_and_casts(tgt, policy):
    N = 32
    x = torch.linspace(-0.95, 0.95, N)
    x[5] = 0.0
    o = torch.zeros(12 * N)
    i = torch.zeros(4 * N, dtype=torch.int32)
    with compiler.use_target(tgt), compiler.numerics(policy):
        math_kernel[(1,)](x, o, i, N)
    o = o.view(12, N)
    ref = [torch.tanh(x), torch.erf(x), torch.pow(x + 2, 1.5), torch.log1p(x), torch.expm1(x), torch.exp(x),
           torch.round(x * 4), torch.trunc(x * 3), x ** 3, torch.copysign(torch.tensor(2.0), x), x / 3,
           torch.fmod(x * 10, 3)]
    for k, r in enumerate(ref):
        torch.testing.assert_close(o[k], r, rtol=3e-6, atol=3e-7, msg=f"output {k}")
    bits = x.view(torch.int32)
    assert torch.equal(i[:N], bits)
    assert torch.equal(i[N:2 * N], x.half().view(torch.int16).int())
    hi = ((bits.long() & 0xFFFFFFFF) * ((bits * 3 + 1).long() & 0xFFFFFFFF)) >> 32
    assert torch.equal(i[2 * N:3 * N], ((hi + 2 ** 31) % 2 ** 32 - 2 ** 31).int())
    want = (x == 0).int() + 2 * torch.signbit(x).int()
    assert torch.equal(i[3 * N:], want)


# -- shapes, scans, arg-reductions -----------------------------------------------------------------
@kernel
def shape_kernel(x_ptr, o_ptr, i_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :], tl.view(x, N, M))
    a, b = tl.split(tl.reshape(x, (M, N // 2, 2)))
    tl.store(o_ptr + M * N + offs, tl.reshape(tl.interleave(b, a), (M, N)))
    tl.store(o_ptr + 2 * M * N + offs, tl.cumsum(x, axis=1))
    tl.store(o_ptr + 3 * M * N + offs, x.cumsum(0, reverse=True))
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.store(o_ptr + 4 * M * N + tl.arange(0, M), v)
    tl.store(i_ptr + tl.arange(0, M), i)
    tl.store(i_ptr + M + tl.arange(0, N), tl.argmin(x, axis=0))
    tl.store(i_ptr + M + N + tl.arange(0, M), tl.argmax(x, 1))
    tl.store(o_ptr + 5 * M * N + tl.arange(0, M * N), tl.ravel(tl.join(a, b)))


@pytest.mark.parametrize("tgt", TARGETS)
@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_shapes_scans_and_arg_reductions(tgt, policy):
    M, N = 4, 8
    x = torch.randint(0, 4, (M, N), generator=_gen(2)).float()   # many ties
    o = torch.zeros(6 * M * N)
    idx = torch.zeros(2 * M + N, dtype=torch.int32)
    with compiler.use_target(tgt), compiler.numerics(policy):
        shape_kernel[(1,)](x, o, idx, M, N)
    assert torch.equal(o[:M * N].view(N, M), x.reshape(N, M))
    assert torch.equal(o[M * N:2 * M * N].view(M, N), x.view(M, N // 2, 2).flip(-1).reshape(M, N))
    assert torch.equal(o[2 * M * N:3 * M * N].view(M, N), x.cumsum(1))
    assert torch.equal(o[3 * M * N:4 * M * N].view(M, N), x.flip(0).cumsum(0).flip(0))
    assert torch.equal(o[4 * M * N:4 * M * N + M], x.max(1).values)
    first = lambda t: int(t.nonzero()[0])  # noqa: E731 - the lowest index of a tie
    assert idx[:M].tolist() == [first(x[r] == x[r].max()) for r in range(M)]
    assert idx[M:M + N].tolist() == [first(x[:, c] == x[:, c].min()) for c in range(N)]
    assert idx[M + N:].tolist() == idx[:M].tolist()
    assert torch.equal(o[5 * M * N:], x.view(M, N // 2, 2).reshape(-1))


@pytest.mark.parametrize("tgt", TARGETS)
def test_cumsum_fp16_accumulates_in_fp32(tgt):
    @kernel
    def k(x_ptr, o_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(o_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), 0))
    x = (torch.rand(64, generator=_gen(3)) * 0.01 + 1).half()
    o = torch.zeros_like(x)
    with compiler.use_target(tgt):
        k[(1,)](x, o, 64)
    assert torch.equal(o, x.float().cumsum(0).half())


# -- memory: block pointers, descriptors, fp8 -------------------------------------------------------
@kernel
def block_kernel(a_ptr, o_ptr, M, N, sm, sn, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    bp = tl.make_block_ptr(a_ptr, (M, N), (sm, sn), (pid * BM, 0), (BM, BN), (1, 0))
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, 2):
        acc += tl.load(bp, boundary_check=(0, 1), padding_option="zero")
        bp = tl.advance(bp, (0, BN))
    out = tl.make_block_ptr(o_ptr, (M, BN), (BN, 1), (pid * BM, 0), (BM, BN), (1, 0))
    tl.store(out, acc, boundary_check=(0,))
    desc = tl.make_tensor_descriptor(a_ptr, [M, N], [sm, sn], [BM, BN])
    d2 = tl.make_tensor_descriptor(o_ptr + M * BN, [M, BN], [BN, 1], [BM, BN])
    d2.store([pid * BM, 0], desc.load([pid * BM, BN + 2]) * 2.0)


@pytest.mark.parametrize("tgt", TARGETS)
def test_block_pointers_and_tensor_descriptors(tgt):
    M, N, BM, BN = 10, 9, 4, 4
    a = torch.arange(M * N, dtype=torch.float32).view(M, N)
    o = torch.full((2 * M * BN,), -1.0)
    with compiler.use_target(tgt):
        block_kernel[(3,)](a, o, M, N, a.stride(0), a.stride(1), BM=BM, BN=BN)
    assert torch.equal(o[:M * BN].view(M, BN), a[:, :4] + a[:, 4:8])
    want = torch.zeros(M, BN)
    want[:, :3] = a[:, 6:9] * 2                 # columns past N are zero-padded
    assert torch.equal(o[M * BN:].view(M, BN), want)


@kernel
def block_dtype_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
    dst = tl.make_block_ptr(y_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
    tl.static_assert(dst.type.element_ty.element_ty == tl.float16)
    tl.static_assert(dst.dtype.element_ty.shape[0] == BLOCK)
    x = tl.load(src, boundary_check=(0,)).to(tl.float32) * 3.0
    tl.store(dst, x.to(dst.dtype.element_ty), boundary_check=(0,))   # a cast to the block's element type


def test_block_pointer_dtype_is_a_pointer_to_its_block():
    """`p.dtype.element_ty` of a block pointer is its block type, which `x.to()` takes for its element type,
    as Triton's does (vllm-kunlun's fla kernels store with it)."""
    x, y = torch.randn(10), torch.zeros(10, dtype=torch.float16)
    block_dtype_kernel[(1,)](x, y, 10, BLOCK=16)
    assert torch.equal(y, (x * 3.0).half())


@kernel
def fp8_kernel(x_ptr, y5_ptr, y4_ptr, z_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(y5_ptr + offs, x)                           # converted at the store
    tl.store(y4_ptr + offs, x.to(tl.float8e4nv))
    a = tl.load(y5_ptr + offs)
    b = tl.load(y4_ptr + offs)
    tl.store(z_ptr + offs, a.to(tl.float32) + b)          # arithmetic happens in fp32


@pytest.mark.parametrize("tgt", TARGETS)
@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_fp8_storage_matches_torch_conversions(tgt, policy):
    x = torch.tensor([1e6, -1e6, 448., 464., 480., 0.3, 57344., 61440., 2 ** -9, 2 ** -10, 2 ** -16, 2 ** -17, -0.0,
                      float("nan"), 3 * 2 ** -18, -1.7] + (torch.randn(48, generator=_gen(4)) * 50).tolist())
    y5 = torch.zeros(64, dtype=torch.float8_e5m2)
    y4 = torch.zeros(64, dtype=torch.float8_e4m3fn)
    z = torch.zeros(64)
    with compiler.use_target(tgt), compiler.numerics(policy):
        fp8_kernel[(1,)](x, y5, y4, z, 64)
    r5, r4 = x.to(torch.float8_e5m2), x.to(torch.float8_e4m3fn)
    assert torch.equal(y5.view(torch.uint8), r5.view(torch.uint8))
    assert torch.equal(y4.view(torch.uint8), r4.view(torch.uint8))
    torch.testing.assert_close(z, r5.float() + r4.float(), equal_nan=True, rtol=0, atol=0)


# -- scalars: where, maximum, full with run-time values, int64 program ids --------------------------
@kernel
def scalar_kernel(o_ptr, v, n, N: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    base = pid * N
    s = tl.where(v > 1.0, v, 0.5)
    m = tl.maximum(2.0, v) + tl.minimum(n, 3)
    f = tl.full((N,), v, tl.float32) + tl.zeros((N,), tl.float32) + tl.zeros_like(tl.full((N,), 1, tl.int32))
    tl.store(o_ptr + base + tl.arange(0, N), f + s + m)
    tl.store(o_ptr + base, tl.clamp(v, 0.0, 1.0))


@pytest.mark.parametrize("tgt", TARGETS)
def test_scalar_where_maximum_full_and_int64_pids(tgt):
    o = torch.zeros(2 * 4)
    with compiler.use_target(tgt):
        scalar_kernel[(2,)](o, 1.5, 7, N=4)
    assert o.tolist() == [1.0, 8.0, 8.0, 8.0] * 2     # 1.5 + 1.5 + 2.0 + 3 ; clamp(1.5) = 1


@pytest.mark.no_toolchain
def test_int64_program_id_arithmetic_is_64_bit_on_cpu_and_gpu():
    for tgt in ("cpu", "gpu:interpret"):
        with compiler.use_target(tgt), compiler.render_only() as seen:
            scalar_kernel[(2,)](torch.zeros(8), 1.5, 7, N=4)
        assert "int64" in seen[0].source or "tl.int64" in seen[0].source


@kernel
def specialised_scalar_kernel(o_ptr, offset, FLAG: tl.constexpr):
    # offset == 1 is specialised to a constant (as in Triton): .to() still applies to it
    v = offset.to(tl.float32) + tl.where(FLAG == 1, 10.0, 20.0)
    tl.store(o_ptr, v)


@pytest.mark.parametrize("tgt", TARGETS)
def test_to_on_specialised_scalars_and_constexpr_where(tgt):
    o = torch.zeros(1)
    with compiler.use_target(tgt):
        specialised_scalar_kernel[(1,)](o, 1, 1)
        assert o.item() == 11.0
        specialised_scalar_kernel[(1,)](o, 5, 0)
        assert o.item() == 25.0


# -- unsigned integers -------------------------------------------------------------------------------
@kernel
def uint_kernel(x_ptr, b_ptr, o_ptr, f_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs).to(tl.uint32)          # int32 -> uint32: the same bits
    h = x * 0x9E3779B1                                # wraps modulo 2**32
    h = h ^ (h >> 15)                                 # a logical shift
    tl.store(o_ptr + offs, h // 7 + h % 1000)         # unsigned division
    tl.store(o_ptr + N + offs, x + (-1))              # the int32 literal promotes to uint32
    tl.store(o_ptr + 2 * N + offs, (h > 2147483648).to(tl.uint32))
    tl.store(f_ptr + offs, h.to(tl.float32))
    u8 = tl.load(b_ptr + offs)
    tl.store(b_ptr + offs, u8 + 200)                  # uint8 wraps
    tl.store(o_ptr + 3 * N + offs, tl.sum(u8, axis=0) + tl.zeros((N,), tl.uint32))


@pytest.mark.parametrize("tgt", TARGETS)
def test_unsigned_integers(tgt):
    import numpy as np
    N = 16
    x = torch.tensor([0, 1, -1, 7, 2 ** 31 - 1, -2 ** 31, 12345, -999] * 2, dtype=torch.int32)
    u8 = torch.arange(N, dtype=torch.uint8) * 17
    xn = x.numpy().view(np.uint32).astype(np.uint64)
    h = (xn * 0x9E3779B1) % 2 ** 32
    h = h ^ (h >> 15)
    want = np.concatenate([(h // 7 + h % 1000) % 2 ** 32, (xn + 2 ** 32 - 1) % 2 ** 32, (h > 2 ** 31),
                           np.full(N, int(u8.numpy().astype(np.uint64).sum()))]).astype(np.uint32).view(np.int32)
    o, f, b = torch.zeros(4 * N, dtype=torch.int32), torch.zeros(N), u8.clone()
    with compiler.use_target(tgt):
        uint_kernel[(1,)](x, b, o, f, N)
    assert np.array_equal(o.numpy(), want)
    assert np.array_equal(f.numpy(), h.astype(np.float32))
    assert torch.equal(b, ((u8.int() + 200) % 256).to(torch.uint8))


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_the_surface_compiles_for_sm_90_without_a_gpu(policy):
    """The interpreter never runs libdevice, tl.range options or fp8 code paths of compiled Triton:
    triton.compile does (PTX and cubin for sm_90)."""
    x = torch.zeros(64)
    with compiler.use_target("gpu:sm_90"), compiler.numerics(policy), compiler.compile_only() as built:
        math_kernel[(1,)](x, torch.zeros(12 * 32), torch.zeros(4 * 32, dtype=torch.int32), 32)
        shape_kernel[(1,)](torch.zeros(4, 8), torch.zeros(6 * 32), torch.zeros(16, dtype=torch.int32), 4, 8)
        fp8_kernel[(1,)](x, torch.zeros(64, dtype=torch.float8_e5m2), torch.zeros(64, dtype=torch.float8_e4m3fn),
                         x, 64)
        uint_kernel[(1,)](torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.uint8),
                          torch.zeros(64, dtype=torch.int32), torch.zeros(16), 16)
        row_kernel[(1,)](torch.zeros(1, 16).half(), torch.zeros(1, 16).half(), 16, 16, 1e-5, 1.0, 1, 1, "mean", 0.5,
                         ttl.float16, BLOCK=16)
    assert len(built) == 5 and all(b is not None for b in built)


@kernel
def rounding_kernel(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + offs, tl.floor(x))
    tl.store(o_ptr + N + offs, tl.ceil(x))
    tl.store(o_ptr + 2 * N + offs, libdevice.trunc(x))
    tl.store(o_ptr + 3 * N + offs, libdevice.rint(x))


@pytest.mark.parametrize("tgt", TARGETS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_exact_rounding_of_narrow_floats(tgt, dtype):
    x = (torch.randn(32, generator=_gen(5)) * 20).to(dtype)
    x[:4] = torch.tensor([2.5, -2.5, 0.5, -0.0])
    o = torch.zeros(4 * 32, dtype=dtype)
    with compiler.use_target(tgt):
        rounding_kernel[(1,)](x, o, 32)
    want = torch.cat([torch.floor(x), torch.ceil(x), torch.trunc(x), torch.round(x)])
    assert torch.equal(o.view(torch.int16), want.view(torch.int16))
