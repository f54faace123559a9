"""Correctness of the library kernels (kernels/) against fp64 torch references and torch SDPA.

Shapes are small and configs are shared between tests so that the whole file compiles only a few
dozen specialisations (each costs ~0.5 s of g++ on a cold cache).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from benchmarks.gpu_check import attention_tolerance
from kernels import (add_rms_norm, add_rms_norm_ref, attention, attention_ref, config_for, layer_norm,
                     layer_norm_ref, matmul, matmul_ref, rms_norm, rms_norm_ref)
from kernels.configs import narrow_dots

pytestmark = pytest.mark.compile

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=F32, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=gen(seed)) * scale).to(dtype)


def assert_near(out, ref64, k=1):
    """out vs an fp64 reference: 2 ulps of out's dtype (relative; 64 for fp32), plus an absolute
    floor for fp32 accumulation over a reduction of length k (~sqrt(k) eps32 times the magnitude)."""
    assert out.dtype in (F32, F16, BF16)
    assert out.shape == ref64.shape
    assert not torch.isnan(out).any()
    eps = torch.finfo(out.dtype).eps
    rtol = {F32: 64 * eps, F16: 2 * eps, BF16: 2 * eps}[out.dtype]
    scale = ref64.abs().max().item() if ref64.numel() else 0.0
    atol = 8 * torch.finfo(F32).eps * math.sqrt(k) * scale + 1e-30
    torch.testing.assert_close(out.double(), ref64.double(), rtol=rtol, atol=atol)


# =============================================================================================
# matmul
# =============================================================================================
# (M, N, K, dtype): every size in {1, 7, 64, 129, 1000} appears as M, as N and as K
MATMUL_CASES = [
    (1, 7, 64, F32), (7, 1, 129, F16), (64, 129, 7, BF16), (129, 64, 1000, F32),
    (1000, 7, 1, F32), (7, 1000, 129, BF16), (129, 1000, 64, F16), (1000, 64, 7, F16),
    (64, 64, 1000, BF16), (1000, 129, 1, BF16), (1, 1, 1, F32), (64, 1000, 129, F32),
]


@pytest.mark.sampled
@pytest.mark.parametrize("M,N,K,dtype", MATMUL_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_matmul_shapes_dtypes(M, N, K, dtype):
    a, b = randn(M, K, dtype=dtype, seed=1), randn(K, N, dtype=dtype, seed=2)
    out = matmul(a, b)
    assert out.dtype == dtype and out.shape == (M, N)
    assert_near(out, matmul_ref(a, b, out_dtype=torch.float64), K)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_matmul_transposed_and_strided_operands(dtype):
    a = randn(48, 70, dtype=dtype, seed=3).t()[:, ::2]    # [70, 24], strides (1, 140)
    b = randn(40, 72, dtype=dtype, seed=4)[:, ::3].t()    # [24, 40], strides (3, 72)
    assert not a.is_contiguous() and not b.is_contiguous()
    out = matmul(a, b)
    assert_near(out, matmul_ref(a, b, out_dtype=torch.float64), a.shape[1])
    # the same through an explicit, non-contiguous out tensor
    holder = torch.zeros(out.shape[1], out.shape[0], dtype=dtype)
    res = matmul(a, b, out=holder.t())
    assert res.data_ptr() == holder.data_ptr()
    assert torch.equal(holder.t(), out)


def test_matmul_batched_3d():
    a = randn(3, 129, 64, seed=5)
    b = randn(3, 64, 7, seed=6)
    out = matmul(a, b)
    assert out.shape == (3, 129, 7)
    assert_near(out, matmul_ref(a, b, out_dtype=torch.float64), 64)
    # batch-strided views (batch not outermost in memory) and a 2-D b shared by every batch
    a2 = randn(129, 3, 64, seed=7).transpose(0, 1)
    b2 = randn(64, 7, seed=8)
    assert_near(matmul(a2, b2), matmul_ref(a2, b2, out_dtype=torch.float64), 64)
    # a 2-D a shared by every batch of b
    b3 = randn(3, 64, 7, seed=9)
    a3 = randn(129, 64, seed=10)
    assert_near(matmul(a3, b3), matmul_ref(a3, b3, out_dtype=torch.float64), 64)


@pytest.mark.sampled
@pytest.mark.parametrize("activation,dtype", [(None, F32), ("relu", F32), ("gelu", F32), ("silu", F32),
                                              ("gelu", BF16), ("silu", F16)], ids=str)
def test_matmul_bias_activation(activation, dtype):
    a, b = randn(64, 129, dtype=dtype, seed=11), randn(129, 7, dtype=dtype, seed=12)
    bias = randn(7, dtype=dtype, seed=13)
    out = matmul(a, b, bias=bias, activation=activation)
    assert_near(out, matmul_ref(a, b, bias, activation, out_dtype=torch.float64), 129)
    # gelu is the tanh approximation: compare with torch's own too
    if activation == "gelu" and dtype == F32:
        ref = F.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.sampled
@pytest.mark.parametrize("a_dt,b_dt,out_dt", [(BF16, F32, None), (F32, BF16, None), (F16, BF16, None),
                                               (BF16, BF16, F32), (F32, F32, BF16), (F16, F32, F16)], ids=str)
def test_matmul_mixed_dtypes_and_out_dtype(a_dt, b_dt, out_dt):
    """Mixed inputs meet in fp32 (exact widening): the result is the fp32 product of the widened
    operands, rounded once to out_dtype (default: the promoted input dtype)."""
    a, b, bias = randn(37, 129, dtype=a_dt, seed=14), randn(129, 20, dtype=b_dt, seed=15), randn(20, dtype=F16, seed=16)
    want = out_dt or torch.promote_types(torch.promote_types(a_dt, b_dt), F16)
    out = matmul(a, b, bias, "silu", out_dtype=out_dt)
    assert out.dtype == want
    assert_near(out, matmul_ref(a, b, bias, "silu", out_dtype=torch.float64), 129)
    if a_dt != b_dt:   # the same bits as the fp32 product of the widened inputs
        assert torch.equal(out, matmul(a.float(), b.float(), bias.float(), "silu").to(want))
    buf = torch.empty(37, 20, dtype=want)
    assert matmul(a, b, bias, "silu", out=buf, out_dtype=out_dt) is buf and torch.equal(buf, out)
    # autograd: each gradient in its input's dtype
    ar, br = a.float().requires_grad_(), b.detach().requires_grad_()
    matmul(ar, br, out_dtype=F32).sum().backward()
    assert ar.grad.dtype == F32 and br.grad.dtype == b_dt
    torch.testing.assert_close(br.grad.double(), (a.double().t() @ torch.ones(37, 20, dtype=torch.float64)).to(b_dt)
                               .double(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("activation,dtype", [("silu_and_mul", F32), ("gelu_and_mul", F32), ("silu_and_mul", BF16)],
                         ids=str)
def test_matmul_gated_epilogue(activation, dtype):
    """b = [gate | up]: act(a @ gate + bias_g) * (a @ up + bias_u), both products in fp32, one rounding."""
    a, b, bias = randn(37, 129, dtype=dtype, seed=17), randn(129, 2 * 30, dtype=dtype, seed=18), randn(60, seed=19)
    out = matmul(a, b, bias.to(dtype), activation)
    assert out.shape == (37, 30)
    assert_near(out, matmul_ref(a, b, bias.to(dtype), activation, out_dtype=torch.float64), 129)
    gate, up = (matmul(a, b[:, s], bias.to(dtype)[s], out_dtype=F32) for s in (slice(0, 30), slice(30, 60)))
    act = F.silu if activation == "silu_and_mul" else (lambda z: F.gelu(z, approximate="tanh"))
    torch.testing.assert_close(out.float(), (act(gate) * up).to(dtype).float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(matmul(a[:0], b, activation=activation), torch.empty(0, 30, dtype=dtype))
    assert torch.equal(matmul(randn(3, 0, dtype=dtype), randn(0, 8, dtype=dtype), activation=activation),
                       torch.zeros(3, 4, dtype=dtype))
    with pytest.raises(ValueError, match=r"matmul: activation 'silu_and_mul' needs b = \[gate \| up\] with an even"):
        matmul(a, b[:, :59], activation="silu_and_mul")
    with pytest.raises(TypeError, match=r"matmul: activation 'gelu_and_mul' has no gradient"):
        matmul(a.float().requires_grad_(), b.float(), activation="gelu_and_mul")


@pytest.mark.no_toolchain
def test_matmul_errors():
    a, b = randn(4, 5), randn(5, 6)
    with pytest.raises(ValueError, match=r"matmul.*inner dimensions"):
        matmul(a, randn(4, 6))
    with pytest.raises(TypeError, match=r"matmul: out has dtype float32, but the output dtype is float16"):
        matmul(a.half(), b.half(), out=torch.empty(4, 6))
    with pytest.raises(TypeError, match=r"matmul: out_dtype must be one of"):
        matmul(a, b, out_dtype=torch.int32)
    with pytest.raises(TypeError, match=r"matmul.*'a'.*float64"):
        matmul(a.double(), b.double())
    with pytest.raises(TypeError, match=r"matmul.*'a'.*torch.Tensor"):
        matmul([[1.0]], b)
    with pytest.raises(ValueError, match=r"matmul.*'a'.*2-D or 3-D"):
        matmul(randn(5), b)
    with pytest.raises(ValueError, match=r"matmul.*bias.*N=6"):
        matmul(a, b, bias=randn(5))
    with pytest.raises(ValueError, match=r"matmul.*activation.*'tanh'"):
        matmul(a, b, activation="tanh")
    with pytest.raises(ValueError, match=r"matmul.*out.*shape"):
        matmul(a, b, out=torch.empty(6, 4))
    with pytest.raises(ValueError, match=r"matmul.*batch sizes"):
        matmul(randn(2, 4, 5), randn(3, 5, 6))
    # meta tensors go through the torch operator's fake implementation: shapes only, no launch
    res = matmul(torch.empty(4, 5, device="meta"), torch.empty(5, 6, device="meta"))
    assert res.is_meta and res.shape == (4, 6)


# =============================================================================================
# norms
# =============================================================================================
# (shape, dtype, config): rows of length 1 and 7, a row walked in 16-wide chunks (100 > 16) and a
# row longer than the default cpu BLOCK (3000 > 1024)
NORM_CASES = [
    ((5, 1), F32, None), ((2, 3, 7), F16, None), ((4, 100), F32, {"BLOCK": 16}),
    ((3, 3000), BF16, None), ((2, 3000), F32, None),
]


def _norm_inputs(shape, dtype):
    N = shape[-1]
    x = randn(*shape, dtype=dtype, seed=20, scale=2.0) + torch.tensor(0.5, dtype=dtype)
    return x, randn(N, dtype=dtype, seed=21), randn(N, dtype=dtype, seed=22), randn(*shape, dtype=dtype, seed=23)


@pytest.mark.parametrize("shape,dtype,config", NORM_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_layer_norm(shape, dtype, config):
    x, w, b, _ = _norm_inputs(shape, dtype)
    out = layer_norm(x, w, b, 1e-5, config=config)
    assert out.shape == x.shape and out.dtype == dtype
    assert_near(out, layer_norm_ref(x, w, b, 1e-5, out_dtype=torch.float64), shape[-1])
    if dtype == F32:  # torch's own layer_norm agrees too
        ref = F.layer_norm(x, (shape[-1],), w, b, 1e-5)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,dtype,config", NORM_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_rms_norm(shape, dtype, config):
    x, w, _, _ = _norm_inputs(shape, dtype)
    out = rms_norm(x, w, 1e-6, config=config)
    assert_near(out, rms_norm_ref(x, w, 1e-6, out_dtype=torch.float64), shape[-1])


@pytest.mark.parametrize("shape,dtype,config", NORM_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_add_rms_norm(shape, dtype, config):
    x, w, _, r = _norm_inputs(shape, dtype)
    normed, new_res = add_rms_norm(x, r, w, 1e-6, config=config)
    # the new residual is x + residual rounded once to the input dtype: exactly torch's add
    assert torch.equal(new_res, x + r)
    ref, ref_res = add_rms_norm_ref(x, r, w, 1e-6, out_dtype=torch.float64)
    assert torch.equal(ref_res, new_res)
    assert_near(normed, ref, shape[-1])


@pytest.mark.sampled
@pytest.mark.parametrize("policy", ["fast", "strict"])
@pytest.mark.parametrize("N,BLOCK,dtype", [(1024, 1024, F32), (1000, 1024, torch.bfloat16), (77, 128, torch.float16),
                                        (512, 512, torch.bfloat16)])
def test_layer_norm_of_a_row_in_one_chunk_keeps_the_bits(N, BLOCK, dtype, policy):
    """A row that fits one BLOCK is read once (ONE_CHUNK) instead of once per pass, a row of
    exactly BLOCK needs no mask (EVEN), and a program may normalise ROWS rows with the weight and
    bias widened once (16 rows: 3, 5 and 16 per program, the last program short): the same
    operations, so the same bits, a row of -0.0 and a row with a NaN included."""
    from compiler import numerics
    from kernels.norm import layer_norm_kernel
    x, w, b, _ = _norm_inputs((16, N), dtype)
    x[3] = -0.0
    x[5, 7] = float("nan")
    outs = []
    with numerics(policy):
        for one, even, per in ((False, False, 1), (True, False, 1), (True, False, 3), (True, False, 16)) + \
                (((True, True, 1), (True, True, 5)) if N == BLOCK else ()):
            y = torch.empty_like(x)
            several = {"ROWS": per, "n_rows": 16} if per > 1 else {}
            layer_norm_kernel[(-(-16 // per),)](x, w, b, y, N, N, 1, N, 1e-5, HAS_W=True, HAS_B=True, ONE_CHUNK=one,
                                                BLOCK=BLOCK, EVEN=even, **several)
            outs.append(y.view(torch.int32 if dtype == F32 else torch.int16))
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_layer_norm_of_narrow_rows_widens_the_weight_once_per_program_on_a_cache_target():
    """The library launch of a one-chunk bf16 layer_norm on the cpu target gives each program
    several rows (ROWS), and the results are those of one row at a time."""
    from compiler import render_only
    x, w, b, _ = _norm_inputs((32, 256), torch.bfloat16)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)   # the rows per program follow the thread count
    try:
        with render_only() as seen:
            layer_norm(x, w, b)
        whole = layer_norm(x, w, b)
    finally:
        torch.set_num_threads(threads)
    assert seen[0].grid == (2,)   # 16 rows a program
    assert torch.equal(whole, torch.cat([layer_norm(x[i:i + 1], w, b) for i in range(32)]))


def test_norms_without_affine_and_non_contiguous_rows():
    x = randn(7, 40, seed=24).t()            # [40, 7], rows strided
    assert_near(layer_norm(x), layer_norm_ref(x, out_dtype=torch.float64), 7)
    assert_near(rms_norm(x), rms_norm_ref(x, out_dtype=torch.float64), 7)


@pytest.mark.no_toolchain
def test_norm_errors():
    x, w = randn(4, 8), randn(8)
    with pytest.raises(ValueError, match=r"rms_norm.*weight.*8"):
        rms_norm(x, randn(7))
    with pytest.raises(TypeError, match=r"layer_norm.*'bias'.*float16"):
        layer_norm(x, w, randn(8).half())
    with pytest.raises(TypeError, match=r"rms_norm.*'x'.*int64"):
        rms_norm(torch.ones(4, 8, dtype=torch.int64), w)
    with pytest.raises(ValueError, match=r"add_rms_norm.*residual.*shape"):
        add_rms_norm(x, randn(4, 7), w)
    with pytest.raises(ValueError, match=r"layer_norm.*eps"):
        layer_norm(x, w, None, -1.0)
    res = rms_norm(torch.empty(4, 8, device="meta"), torch.empty(8, device="meta"))   # shapes only
    assert res.is_meta and res.shape == (4, 8)


# =============================================================================================
# attention
# =============================================================================================
def _qkv(B, Hq, Hkv, Sq, Sk, D, dtype, seed=30):
    return (randn(B, Hq, Sq, D, dtype=dtype, seed=seed), randn(B, Hkv, Sk, D, dtype=dtype, seed=seed + 1),
            randn(B, Hkv, Sk, D, dtype=dtype, seed=seed + 2))


def _sdpa(q, k, v, causal, scale=None):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)


# (B, Hq, Hkv, Sq, Sk, D, dtype, causal)
ATTN_CASES = [
    (2, 2, 2, 50, 50, 64, F32, False),
    (2, 2, 2, 50, 50, 64, F32, True),
    (1, 8, 2, 40, 40, 64, F16, True),          # grouped-query: 8 q heads over 2 kv heads
    (1, 2, 2, 33, 33, 128, BF16, False),
    (1, 2, 1, 37, 37, 80, F32, True),           # head_dim 80, padded to 128 with masks
    (2, 4, 2, 1, 1000, 64, F16, False),         # decode: one query, long KV
]


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,dtype,causal", ATTN_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_attention_vs_sdpa(B, Hq, Hkv, Sq, Sk, D, dtype, causal):
    q, k, v = _qkv(B, Hq, Hkv, Sq, Sk, D, dtype)
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (B, Hq, Sq) and lse.dtype == F32
    if narrow_dots(dtype):   # p rounded to v's dtype for P.V (docs/numerics.md): by max |v| x its unit roundoff
        torch.testing.assert_close(out.double(), _sdpa(q, k, v, causal).double(),
                                   **attention_tolerance(dict(rtol=2 * torch.finfo(dtype).eps, atol=0.0), v))
    else:
        assert_near(out, _sdpa(q, k, v, causal), Sk)
    # lse against torch.logsumexp of the (masked) scaled scores
    group = Hq // Hkv
    s = q.double() @ k.double().repeat_interleave(group, 1).transpose(-1, -2) / math.sqrt(D)
    if causal:
        s = s.masked_fill(~torch.ones(Sq, Sk, dtype=torch.bool).tril(Sk - Sq), -math.inf)
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)


@pytest.mark.sampled
@pytest.mark.parametrize("policy", ["fast", "strict"])
@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,dtype", [
    (2, 8, 2, 1, 77, 64, False, F32), (2, 8, 2, 3, 40, 64, True, F32),
    (1, 4, 1, 1, 33, 128, True, torch.bfloat16), (2, 6, 3, 5, 19, 32, True, torch.float16)])
def test_grouped_query_heads_packed_into_one_block_keep_the_bits(B, Hq, Hkv, Sq, Sk, D, causal, dtype, policy,
                                                                monkeypatch):
    """Decode-like GQA packs the query heads of a kv head into the rows of one block (PACK_GQA):
    out and lse equal, bit for bit, the same attention over K/V expanded to one head per query
    head (which is not packed)."""
    import sys
    from compiler import numerics
    module = sys.modules["kernels.attention"]
    kernel, grids = module.attention_kernel, []

    class Spy:   # notes each launch's grid, then launches
        def __getitem__(self, grid):
            grids.append(grid)
            return kernel[grid]

    q = randn(B, Hq, Sq, D, dtype=dtype, seed=40)
    k, v = randn(B, Hkv, Sk, D, dtype=dtype, seed=41), randn(B, Hkv, Sk, D, dtype=dtype, seed=42)
    g = Hq // Hkv
    with numerics(policy):
        monkeypatch.setattr(module, "attention_kernel", Spy())
        packed = attention(q, k, v, causal=causal, return_lse=True)
        monkeypatch.undo()
        expanded = attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), causal=causal, return_lse=True)
    assert [grid[1] for grid in grids] == [B * Hkv]   # one program per (batch, kv head)
    assert torch.equal(packed[0], expanded[0]) and torch.equal(packed[1], expanded[1])


def test_attention_custom_scale_and_strided_inputs():
    # [B, S, H, D] storage viewed as [B, H, S, D]: non-contiguous q/k/v
    q = randn(2, 50, 2, 64, seed=40).transpose(1, 2)
    k = randn(2, 50, 2, 64, seed=41).transpose(1, 2)
    v = randn(2, 50, 2, 64, seed=42).transpose(1, 2)
    out = attention(q, k, v, causal=True, scale=0.3)
    assert_near(out, _sdpa(q, k, v, True, scale=0.3), 50)


def test_attention_causal_rectangular_is_bottom_right_aligned():
    # seq_q < seq_k: query i sees keys j <= i + (seq_k - seq_q) (KV-cache convention)
    q, k, v = _qkv(1, 2, 2, 20, 50, 64, F32, seed=43)
    out = attention(q, k, v, causal=True)
    mask = torch.ones(20, 50, dtype=torch.bool).tril(30)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    assert_near(out, ref, 50)
    # seq_q > seq_k: the first seq_q - seq_k queries see no key: output 0 and lse -inf, no NaN
    q, k, v = _qkv(1, 2, 2, 50, 20, 64, F32, seed=44)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(out[:, :, :30], torch.zeros_like(out[:, :, :30]))
    assert torch.isneginf(lse[:, :, :30]).all() and torch.isfinite(lse[:, :, 30:]).all()
    ref, ref_lse = attention_ref(q, k, v, causal=True, return_lse=True, out_dtype=torch.float64)
    assert_near(out, ref, 20)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.no_toolchain
def test_attention_errors():
    q, k, v = _qkv(1, 4, 2, 8, 8, 16, F32)
    with pytest.raises(ValueError, match=r"attention.*kv heads \(3\).*q heads \(4\)"):
        attention(q, randn(1, 3, 8, 16), randn(1, 3, 8, 16))
    with pytest.raises(ValueError, match=r"attention.*k and v.*same shape"):
        attention(q, k, randn(1, 2, 9, 16))
    with pytest.raises(ValueError, match=r"attention.*head dims"):
        attention(q, randn(1, 2, 8, 32), randn(1, 2, 8, 32))
    with pytest.raises(ValueError, match=r"attention.*'q'.*4-D"):
        attention(q[0], k, v)
    with pytest.raises(TypeError, match=r"attention.*'k'.*bfloat16"):
        attention(q, k.bfloat16(), v)
    res = attention(*(torch.empty(1, 2, 4, 16, device="meta") for _ in range(3)))   # shapes only
    assert res.is_meta and res.shape == (1, 2, 4, 16)


# =============================================================================================
# configs
# =============================================================================================
@pytest.mark.no_toolchain
def test_config_for_ignores_batch_like_dims():
    # only params a target declares bit-neutral may follow a batch dim (cpu: matmul's BLOCK_M,
    # and its dot_tiles, since a cpu dot chains across tiles; see test_batch_invariance)
    from compiler import get_target
    from kernels.matmul import SPEC as MATMUL
    small, large = config_for("matmul", "cpu", M=17, N=1000, K=129), config_for("matmul", "cpu", M=4096, N=1000, K=129)
    free = {p for p in MATMUL.follows if p in get_target("cpu").caps.bit_neutral} | MATMUL.dot_tiles
    assert small != large and {k for k in small if small[k] != large[k]} <= free
    assert config_for("matmul", "gpu:sm_90", M=1, N=1000, K=129) == config_for("matmul", "gpu:sm_90", M=4096, N=1000, K=129)
    assert config_for("rms_norm", "cpu", N=3000, rows=1) == config_for("rms_norm", "cpu", N=3000, rows=999)
    a = config_for("attention", "cpu", head_dim=80, seq_k=1000, seq_q=1, batch=1)
    b = config_for("attention", "cpu", head_dim=80, seq_k=1000, seq_q=1000, batch=64)
    assert a["BLOCK_N"] == b["BLOCK_N"] and a["BLOCK_D"] == b["BLOCK_D"] == 128
    assert config_for("matmul", "cpu", N=4096, K=4096) == {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128}
    assert config_for("matmul", "kunlun:xpu2", N=4096, K=4096) == {"BLOCK_M": 8, "BLOCK_N": 32, "BLOCK_K": 32}
    with pytest.raises(ValueError, match="unknown op"):
        config_for("conv", "cpu")
