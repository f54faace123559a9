"""Example tile kernels for the demo, written in the Triton-compatible subset of tilejit.

Every example is a ``@kernel`` tile program, a torch-facing wrapper that allocates the output and
launches it, and a torch reference.  ``EXAMPLES`` lists them for a demo to iterate::

    for name, wrapper, reference, make_inputs, shapes in EXAMPLES:
        for shape in shapes:
            args = make_inputs(shape)
            torch.testing.assert_close(wrapper(*args), reference(*args), **TOLERANCES.get(name, {}))

All kernels compute in fp32 and round once, at the store, to the output dtype.
"""

from __future__ import annotations

import torch

from compiler import kernel, language as tl


def _cdiv(a, b):
    return (a + b - 1) // b


def _npow2(n):
    return 1 << max(0, (n - 1).bit_length())


# ============================================================================================
# 1. vector add
# ============================================================================================
@kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y, mask=m)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    assert x.shape == y.shape and x.dtype == y.dtype
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda meta: (_cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=1024)
    return out


def add_ref(x, y):
    return x + y


# ============================================================================================
# 2. fused softmax over rows (one program per row, the row in one block)
# ============================================================================================
@kernel
def softmax_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    y = num / den
    tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    assert x.dim() == 2 and x.stride(1) == 1
    rows, cols = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=_npow2(cols))
    return out


def softmax_ref(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


# ============================================================================================
# 3. layernorm forward over rows (column chunks with loop-carried fp32 tiles)
# ============================================================================================
@kernel
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        d = tl.where(cols < N, x - mean, 0.0)
        acc2 += d * d
    rstd = tl.rsqrt(tl.sum(acc2, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    assert x.dim() == 2 and x.is_contiguous()
    rows, N = x.shape
    y = torch.empty_like(x)
    layernorm_kernel[(rows,)](x, weight, bias, y, N, x.stride(0), eps, BLOCK=min(1024, _npow2(N)))
    return y


def layernorm_ref(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(),
                                          eps).to(x.dtype)


# ============================================================================================
# 4. matmul: fp16/bf16/fp32 inputs, fp32 accumulator carried over the K loop
# ============================================================================================
@kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0] and a.dtype == b.dtype
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype)
    grid = lambda meta: (_cdiv(M, meta["BLOCK_M"]), _cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c


def matmul_ref(a, b):
    return (a.float() @ b.float()).to(a.dtype)


# ============================================================================================
# 5. row-wise sum and max (loop over column chunks; carried scalars started from Python floats)
# ============================================================================================
@kernel
def row_sum_max_kernel(x_ptr, sum_ptr, max_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    total = 0.0
    m = -float("inf")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        total += tl.sum(x, axis=0)
        m = tl.maximum(m, tl.max(tl.where(mask, x, -float("inf")), axis=0))
    tl.store(sum_ptr + row, total)
    tl.store(max_ptr + row, m)


def row_sum_max(x: torch.Tensor):
    assert x.dim() == 2 and x.stride(1) == 1
    rows, cols = x.shape
    s = torch.empty(rows, dtype=torch.float32)
    m = torch.empty(rows, dtype=torch.float32)
    row_sum_max_kernel[(rows,)](x, s, m, cols, x.stride(0), BLOCK=256)
    return s, m


def row_sum_max_ref(x):
    return x.float().sum(1), x.float().amax(1)


# ============================================================================================
# 6. elementwise activations: gelu (tanh approximation) and silu
# ============================================================================================
@kernel
def _tanh(x):
    # tanh(x) = 2 * sigmoid(2x) - 1
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@kernel
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + _tanh(inner))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=m)


@kernel
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x * tl.sigmoid(x)).to(out_ptr.dtype.element_ty), mask=m)


def gelu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    gelu_kernel[(_cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


def gelu_ref(x):
    return torch.nn.functional.gelu(x.float(), approximate="tanh").to(x.dtype)


def silu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(_cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


def silu_ref(x):
    return torch.nn.functional.silu(x.float()).to(x.dtype)


# ============================================================================================
# 7. gather through an index tensor (embedding lookup: the row index is loaded from memory)
# ============================================================================================
@kernel
def embedding_kernel(idx_ptr, table_ptr, out_ptr, D, table_stride, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(idx_ptr + pid)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        m = cols < D
        v = tl.load(table_ptr + row * table_stride + cols, mask=m)
        tl.store(out_ptr + pid * D + cols, v, mask=m)


def embedding(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    assert idx.dtype in (torch.int32, torch.int64) and table.stride(1) == 1
    idx = idx.contiguous()
    D = table.shape[1]
    out = torch.empty((*idx.shape, D), dtype=table.dtype)
    embedding_kernel[(idx.numel(),)](idx, table, out, D, table.stride(0), BLOCK_D=min(256, _npow2(D)))
    return out


def embedding_ref(idx, table):
    return table[idx.long()]


# ============================================================================================
# 8. strided 2-D copy / transpose (any input and output strides; ragged tiles at the edges)
# ============================================================================================
@kernel
def copy2d_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask)
    tl.store(out_ptr + rm[:, None] * som + rn[None, :] * son, x, mask=mask)


def transpose(x: torch.Tensor) -> torch.Tensor:
    """out = x.T as a new contiguous tensor; x may have any strides."""
    assert x.dim() == 2
    M, N = x.shape
    out = torch.empty((N, M), dtype=x.dtype)
    # element (m, n) of x goes to out[n, m]: out strides seen from x's indices are (1, M)
    copy2d_kernel[(_cdiv(M, 32), _cdiv(N, 32))](x, out, M, N, x.stride(0), x.stride(1),
                                                 out.stride(1), out.stride(0), BM=32, BN=32)
    return out


def transpose_ref(x):
    return x.t().contiguous()


# ============================================================================================
# inputs and the list the demo iterates
# ============================================================================================
def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _make_add(shape):
    g = _gen(1)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def _make_rows(shape, dtype=torch.float32):
    return (torch.randn(shape, generator=_gen(2)) * 2).to(dtype),


def _make_softmax(shape):
    return _make_rows(shape, torch.float16 if shape[1] > 500 else torch.float32)


def _make_layernorm(shape):
    g = _gen(3)
    rows, N = shape
    return (torch.randn(shape, generator=g) * 2 + 1, torch.randn(N, generator=g), torch.randn(N, generator=g))


def _make_matmul(shape):
    g = _gen(4)
    M, N, K = shape
    dtype = torch.float16 if M >= 64 else torch.float32
    return (torch.randn((M, K), generator=g).to(dtype), torch.randn((K, N), generator=g).to(dtype))


def _make_embedding(shape):
    g = _gen(5)
    n_idx, vocab, D = shape
    return torch.randint(0, vocab, (n_idx,), generator=g), torch.randn((vocab, D), generator=g)


def _make_transpose(shape):
    g = _gen(6)
    M, N = shape
    return (torch.randn((M, 2 * N), generator=g)[:, ::2],)   # non-contiguous input


EXAMPLES = [
    # (name, wrapper, reference, make_inputs(shape) -> args tuple, shapes)
    ("vector_add", add, add_ref, _make_add, [(1000,), (65536 + 17,)]),
    ("softmax_rows", softmax, softmax_ref, _make_softmax, [(64, 100), (8, 1000)]),
    ("layernorm_rows", layernorm, layernorm_ref, _make_layernorm, [(16, 100), (4, 3000)]),
    ("matmul", matmul, matmul_ref, _make_matmul, [(17, 33, 45), (128, 96, 256)]),
    ("row_sum_max", row_sum_max, row_sum_max_ref, _make_rows, [(7, 1), (32, 1000)]),
    ("gelu", gelu, gelu_ref, lambda shape: _make_rows(shape), [(1000,), (4, 4097)]),
    ("silu", silu, silu_ref, lambda shape: _make_rows(shape, torch.bfloat16), [(1000,), (3, 777)]),
    ("embedding_gather", embedding, embedding_ref, _make_embedding, [(10, 50, 64), (100, 1000, 300)]),
    ("transpose", transpose, transpose_ref, _make_transpose, [(17, 5), (100, 130)]),
]

# tolerances for comparing wrapper(*args) with reference(*args) (torch.testing.assert_close
# keyword arguments); absent = torch's defaults for the dtype
TOLERANCES = {
    "vector_add": dict(rtol=0, atol=0),
    "transpose": dict(rtol=0, atol=0),
    "embedding_gather": dict(rtol=0, atol=0),
    "row_sum_max": dict(rtol=1e-5, atol=1e-4),    # reduction order differs from torch's
    "layernorm_rows": dict(rtol=1e-5, atol=1e-5),
    "softmax_rows": dict(rtol=1e-5, atol=1e-6),   # fp32 rows; fp16 rows use fp16 defaults below
    "matmul": dict(rtol=1e-4, atol=1e-4),         # fp32 summation order; fp16 outputs: 1 ulp
    "gelu": dict(rtol=1e-5, atol=1e-6),
}


def tolerance(name: str, out: torch.Tensor) -> dict:
    """assert_close keyword arguments for example ``name`` with output ``out``."""
    if out.dtype in (torch.float16, torch.bfloat16):
        return {} if name not in ("vector_add", "transpose", "embedding_gather") else dict(rtol=0, atol=0)
    return TOLERANCES.get(name, {})
