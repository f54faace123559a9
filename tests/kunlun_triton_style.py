"""Triton-style kernels at the block sizes their authors launch them with (written here in the tile
language the way such kernels are usually written), for the kunlun target's memory-plan tests:
a row softmax with BLOCK = the next power of two of the row, a layer norm with a BLOCK-wide
carried accumulator, a grouped-order matmul with loop-carried pointer tiles, a flash-attention
forward over 64 x 64 tiles, and a cross-entropy forward over a 32K vocabulary with int64 labels
(loss per row, the gradient written over the logits)."""
from __future__ import annotations

from compiler import kernel, language as tl


@kernel
def softmax_rows(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_row = in_ptr + row * in_row_stride
    vals = tl.load(in_row + cols, mask=cols < n_cols, other=-float("inf"))
    shifted = vals - tl.max(vals, axis=0)
    e = tl.exp(shifted)
    res = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, res, mask=cols < n_cols)


@kernel
def layer_norm_rows(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    part = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        part += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(part, axis=0) / N
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        xc = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        xc = tl.where(cols < N, xc - mean, 0.0)
        sq += xc * xc
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = cols < N
        w = tl.load(W + cols, mask=m)
        b = tl.load(B + cols, mask=m)
        xc = tl.load(X + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cols, ((xc - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=m)


@kernel
def matmul_grouped(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = A + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = B + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    c = acc.to(C.dtype.element_ty)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(C + cm[:, None] * scm + cn[None, :] * scn, c, mask=(cm[:, None] < M) & (cn[None, :] < N))


@kernel
def flash_attn_fwd(Q, K, V, Out, Lse, sm_scale, sqz, sqh, sqm, sqd, skz, skh, skn, skd, svz, svh, svn, svd,
                   soz, soh, som, sod, H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    z = off_hz // H
    h = off_hz % H
    q_base = Q + z.to(tl.int64) * sqz + h.to(tl.int64) * sqh
    k_base = K + z.to(tl.int64) * skz + h.to(tl.int64) * skh
    v_base = V + z.to(tl.int64) * svz + h.to(tl.int64) * svh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd, mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    hi = N_CTX
    if CAUSAL:
        hi = tl.minimum(N_CTX, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * skn + offs_d[:, None] * skd, mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        ok = cols[None, :] < N_CTX
        if CAUSAL:
            ok = ok & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(ok, qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * svn + offs_d[None, :] * svd, mask=cols[:, None] < N_CTX, other=0.0)
        acc = acc * alpha[:, None]
        acc += tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Lse + off_hz * N_CTX + offs_m, m_i + tl.log2(l_i), mask=offs_m < N_CTX)
    o_base = Out + z.to(tl.int64) * soz + h.to(tl.int64) * soh
    tl.store(o_base + offs_m[:, None] * som + offs_d[None, :] * sod, acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


@kernel
def cross_entropy_fwd(X, x_stride, Y, Loss, n_cols, ignore_index, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * x_stride
    label = tl.load(Y + row)
    run_max = -float("inf")
    run_sum = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, 0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), 0)
        run_max = new_max
    lse = run_max + tl.log(run_sum)
    valid = label != ignore_index
    x_label = tl.load(X + tl.where(valid, label, 0)).to(tl.float32)
    tl.store(Loss + row, tl.where(valid, lse - x_label, 0.0))
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        g = tl.exp(x - lse)
        g = tl.where(cols == label, g - 1.0, g)
        tl.store(X + cols, tl.where(valid, g, 0.0).to(X.dtype.element_ty), mask=cols < n_cols)
