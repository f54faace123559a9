"""Backward of attention (causal or not, grouped-query, with the bool mask): the autograd formula
of tilejit::attention, flash-attention style, as three tile programs.

With S = scale * q k^T (masked), P = exp(S - lse) (lse saved by the forward), O = P v:

    delta = rowsum(dO * O) - dlse            attention_bwd_delta_kernel, one program per query block
    dP = dO v^T,  dS = P * (dP - delta)
    dQ = scale * dS k                        attention_bwd_dq_kernel: one program per query block,
                                             walking the key blocks in ascending order
    dK = scale * dS^T q,  dV = P^T dO        attention_bwd_dkdv_kernel: one program per KV block of a
                                             KV head, walking the GROUP query heads of that KV head,
                                             then their query blocks, in ascending order

No atomics: every gradient element is owned by one program, and each is one chain of fused
multiply-adds (`tl.dot(a, b, acc)` accumulates in ascending k) over a fixed order of keys, or of
(query head, query) pairs. P and dP are recomputed from q, k, v, dO as the forward computes S: one
fma chain over head_dim, carried across BLOCK_DK chunks. So no block size changes a bit (all are
`bit_neutral`), and a sequence's gradients do not depend on the batch it is in.
"""
from __future__ import annotations

import math

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .attention import _mask_tile, _shapes as _fwd_shapes, attention_ref
from .checks import cdiv, check_device
from .configs import select
from .torch_ops import decode_config, define, encode_config, set_backward


@kernel
def _dot_rows(x_base, y_base, offs_m, offs_n, m_ok, n_ok, D, sxm, sxd, syn, syd, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr):
    """x[offs_m, :] . y[offs_n, :] over head_dim: [BLOCK_M, BLOCK_N] fp32, one fma chain per element."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, BLOCK_D, BLOCK_DK):
        offs_d = d0 + tl.arange(0, BLOCK_DK)
        d_ok = offs_d < D
        x = tl.load(x_base + offs_m[:, None] * sxm + offs_d[None, :] * sxd, mask=m_ok[:, None] & d_ok[None, :],
                    other=0.0).to(tl.float32)
        yt = tl.load(y_base + offs_n[None, :] * syn + offs_d[:, None] * syd, mask=d_ok[:, None] & n_ok[None, :],
                     other=0.0).to(tl.float32)
        acc = tl.dot(x, yt, acc)
    return acc


@kernel
def _cols(base, offs, ok, cols, c_ok, s_row, s_col):
    """rows `offs` x columns `cols` of a [seq, head_dim] slice, in fp32."""
    return tl.load(base + offs[:, None] * s_row + cols[None, :] * s_col, mask=ok[:, None] & c_ok[None, :],
                   other=0.0).to(tl.float32)


@kernel
def _p_and_ds(q_base, k_base, v_base, do_base, mask_ptr, b, h, offs_m, offs_n, m_ok, n_ok, lse, delta, diag,
              scale, D, smb, smh, smm, smn, sqm, sqd, skn, skd, svn, svd, sdm, sdd,
              CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr):
    """(P, dS) of one [BLOCK_M, BLOCK_N] block: masked entries are 0 in both."""
    s = _dot_rows(q_base, k_base, offs_m, offs_n, m_ok, n_ok, D, sqm, sqd, skn, skd,
                  BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DK) * scale
    valid = m_ok[:, None] & n_ok[None, :]
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None] + diag)
    if HAS_MASK:
        valid = _mask_tile(mask_ptr, b, h, smb, smh, smm, smn, offs_m, offs_n, valid)
    p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
    dp = _dot_rows(do_base, v_base, offs_m, offs_n, m_ok, n_ok, D, sdm, sdd, svn, svd,
                   BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DK)
    return p, p * (dp - delta[:, None])


@kernel
def _row_stats(lse_ptr, delta_ptr, row0, offs_m, m_ok):
    """The saved lse (a row with no key: -inf, used as 0: its P is 0 anyway) and delta of the rows."""
    lse = tl.load(lse_ptr + row0 + offs_m, mask=m_ok, other=0.0)
    lse = tl.where(lse == -float("inf"), 0.0, lse)
    return lse, tl.load(delta_ptr + row0 + offs_m, mask=m_ok, other=0.0)


@kernel
def attention_bwd_delta_kernel(o_ptr, do_ptr, dlse_ptr, delta_ptr, Hq, Sq, D, sob, soh, som, sod, sdb, sdh, sdm,
                               sdd, HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // Hq
    h = pid_bh % Hq
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < Sq
    d_ok = offs_d < D
    o = _cols(o_ptr + b.to(tl.int64) * sob + h.to(tl.int64) * soh, offs_m, m_ok, offs_d, d_ok, som, sod)
    do = _cols(do_ptr + b.to(tl.int64) * sdb + h.to(tl.int64) * sdh, offs_m, m_ok, offs_d, d_ok, sdm, sdd)
    delta = tl.sum(o * do, axis=1)
    row0 = pid_bh.to(tl.int64) * Sq
    if HAS_DLSE:
        delta = delta - tl.load(dlse_ptr + row0 + offs_m, mask=m_ok, other=0.0)
    tl.store(delta_ptr + row0 + offs_m, delta, mask=m_ok)


@kernel
def attention_bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, mask_ptr, dq_ptr,
                            Hq, GROUP, Sq, Sk, D, scale, smb, smh, smm, smn,
                            sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdm, sdd,
                            CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr,
                            BLOCK_DO: tl.constexpr):
    """dQ[rows, columns] of one query block (dq has q's strides)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // Hq
    h = pid_bh % Hq
    hk = h // GROUP
    q_base = q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    k_base = k_ptr + b.to(tl.int64) * skb + hk.to(tl.int64) * skh
    v_base = v_ptr + b.to(tl.int64) * svb + hk.to(tl.int64) * svh
    do_base = do_ptr + b.to(tl.int64) * sdb + h.to(tl.int64) * sdh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(2) * BLOCK_DO + tl.arange(0, BLOCK_DO)
    m_ok = offs_m < Sq
    c_ok = cols < D
    lse, delta = _row_stats(lse_ptr, delta_ptr, pid_bh.to(tl.int64) * Sq, offs_m, m_ok)
    acc = tl.zeros((BLOCK_M, BLOCK_DO), dtype=tl.float32)
    diag = Sk - Sq
    hi = Sk
    if CAUSAL:
        hi = tl.minimum(Sk, (pid_m + 1) * BLOCK_M + diag)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < Sk
        p, ds = _p_and_ds(q_base, k_base, v_base, do_base, mask_ptr, b, h, offs_m, offs_n, m_ok, n_ok, lse, delta,
                          diag, scale, D, smb, smh, smm, smn, sqm, sqd, skn, skd, svn, svd, sdm, sdd,
                          CAUSAL, HAS_MASK, BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DK)
        acc = tl.dot(ds, _cols(k_base, offs_n, n_ok, cols, c_ok, skn, skd), acc)
    tl.store(dq_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh + offs_m[:, None] * sqm + cols[None, :] * sqd,
             (acc * scale).to(dq_ptr.dtype.element_ty), mask=m_ok[:, None] & c_ok[None, :])


@kernel
def attention_bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, mask_ptr, dk_ptr, dv_ptr,
                              Hq, Hkv, GROUP, Sq, Sk, D, scale, smb, smh, smm, smn,
                              sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdm, sdd,
                              CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr,
                              BLOCK_DO: tl.constexpr):
    """dK, dV[keys, columns] of one KV block of one KV head (dk, dv have k's / v's strides)."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // Hkv
    hk = pid_bh % Hkv
    k_base = k_ptr + b.to(tl.int64) * skb + hk.to(tl.int64) * skh
    v_base = v_ptr + b.to(tl.int64) * svb + hk.to(tl.int64) * svh
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(2) * BLOCK_DO + tl.arange(0, BLOCK_DO)
    n_ok = offs_n < Sk
    c_ok = cols < D
    dk = tl.zeros((BLOCK_N, BLOCK_DO), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_DO), dtype=tl.float32)
    diag = Sk - Sq
    lo = 0
    if CAUSAL:   # the first query block that sees a key of this block: query m sees key n iff m >= n - diag
        lo = tl.maximum(0, pid_n * BLOCK_N - diag) // BLOCK_M * BLOCK_M
    for g in range(0, GROUP):
        h = hk * GROUP + g
        q_base = q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
        do_base = do_ptr + b.to(tl.int64) * sdb + h.to(tl.int64) * sdh
        row0 = (b * Hq + h).to(tl.int64) * Sq
        for start_m in range(lo, Sq, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            m_ok = offs_m < Sq
            lse, delta = _row_stats(lse_ptr, delta_ptr, row0, offs_m, m_ok)
            p, ds = _p_and_ds(q_base, k_base, v_base, do_base, mask_ptr, b, h, offs_m, offs_n, m_ok, n_ok, lse,
                              delta, diag, scale, D, smb, smh, smm, smn, sqm, sqd, skn, skd, svn, svd, sdm, sdd,
                              CAUSAL, HAS_MASK, BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DK)
            dv = tl.dot(tl.trans(p), _cols(do_base, offs_m, m_ok, cols, c_ok, sdm, sdd), dv)
            dk = tl.dot(tl.trans(ds), _cols(q_base, offs_m, m_ok, cols, c_ok, sqm, sqd), dk)
    ok = n_ok[:, None] & c_ok[None, :]
    tl.store(dk_ptr + b.to(tl.int64) * skb + hk.to(tl.int64) * skh + offs_n[:, None] * skn + cols[None, :] * skd,
             (dk * scale).to(dk_ptr.dtype.element_ty), mask=ok)
    tl.store(dv_ptr + b.to(tl.int64) * svb + hk.to(tl.int64) * svh + offs_n[:, None] * svn + cols[None, :] * svd,
             dv.to(dv_ptr.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------------------------
# the backward operator tilejit::attention_backward and the autograd formula of tilejit::attention
# ---------------------------------------------------------------------------------------------
def _shapes(q, k, v, mask, causal, scale, out, lse, dout, dlse, config):
    (o_shape, dt), _ = _fwd_shapes(q, k, v, mask, causal, scale, False, None)
    for name, t in (("out", out), ("dout", dout)):
        if tuple(t.shape) != tuple(o_shape) or t.dtype != dt:
            raise ValueError(f"attention_backward: {name} has shape {tuple(t.shape)} ({t.dtype}), expected "
                             f"{tuple(o_shape)} ({dt})")
    if tuple(lse.shape) != tuple(o_shape[:3]):
        raise ValueError(f"attention_backward: lse has shape {tuple(lse.shape)}, expected {tuple(o_shape[:3])}")
    return (q.shape, dt), (k.shape, dt), (v.shape, dt)


def _blocks(cfg: dict, D: int) -> dict:
    cfg = dict(cfg)
    cfg["BLOCK_D"] = npow2(D)
    for key in ("BLOCK_DK", "BLOCK_DO"):
        cfg[key] = min(cfg.get(key, cfg["BLOCK_D"]), cfg["BLOCK_D"])
        if cfg["BLOCK_D"] % cfg[key]:
            raise ValueError(f"attention_backward: config {key}={cfg[key]} must divide BLOCK_D={cfg['BLOCK_D']}")
    return cfg


def _launch(q, k, v, mask, causal, scale, out, lse, dout, dlse, config, dq, dk, dv):
    op = "attention_backward"
    check_device(op, q=q, k=k, v=v, mask=mask, out=out, lse=lse, dout=dout, dlse=dlse, dq=dq, dk=dk, dv=dv)
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    if not (B * Hq * Sq * Sk and D):   # nothing attended: no gradient flows
        for t in (dq, dk, dv):
            t.zero_()
        return
    # the gradients are allocated contiguous: the inputs too, so that both share one set of strides
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    cfg = _blocks(decode_config(config) or select(ATTENTION_BACKWARD, None, head_dim=D, seq_k=Sk, seq_q=Sq), D)
    bm, bn, bd, bdk, bdo = (cfg[n] for n in ("BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_DK", "BLOCK_DO"))
    delta = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
    lse = lse.contiguous()
    dl = dlse.contiguous() if dlse is not None else None
    attention_bwd_delta_kernel[(cdiv(Sq, bm), B * Hq)](
        out, dout, dl, delta, Hq, Sq, D, *out.stride(), *dout.stride(), HAS_DLSE=dl is not None,
        BLOCK_M=bm, BLOCK_D=bd)
    m8 = mask.expand(B, Hq, Sq, Sk).view(torch.int8) if mask is not None else None
    ms = m8.stride() if m8 is not None else (0,) * 4
    strides = (*ms, *q.stride(), *k.stride(), *v.stride(), *dout.stride())
    blocks = dict(CAUSAL=causal, HAS_MASK=m8 is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, BLOCK_DK=bdk,
                  BLOCK_DO=bdo)
    attention_bwd_dq_kernel[(cdiv(Sq, bm), B * Hq, bd // bdo)](
        q, k, v, dout, lse, delta, m8, dq, Hq, Hq // Hkv, Sq, Sk, D, float(scale), *strides, **blocks)
    attention_bwd_dkdv_kernel[(cdiv(Sk, bn), B * Hkv, bd // bdo)](
        q, k, v, dout, lse, delta, m8, dk, dv, Hq, Hkv, Hq // Hkv, Sq, Sk, D, float(scale), *strides, **blocks)


def attention_backward_ref(q, k, v, mask, causal, scale, out, lse, dout, dlse):
    """fp64 (dq, dk, dv) by the formulas of the module docstring (GQA: dk/dv summed over each group)."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    G = Hq // Hkv
    qd, do = q.double(), dout.double()
    kd, vd = k.double().repeat_interleave(G, dim=1), v.double().repeat_interleave(G, dim=1)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    allowed = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed.tril(Sk - Sq)
    if mask is not None:
        allowed = allowed & mask
    lse_safe = torch.where(torch.isinf(lse.double()), 0.0, lse.double())
    p = torch.where(allowed, torch.exp(s - lse_safe[..., None]), 0.0)
    delta = (do * out.double()).sum(-1) - (dlse.double() if dlse is not None else 0.0)
    ds = p * (torch.matmul(do, vd.transpose(-1, -2)) - delta[..., None])
    dq = torch.matmul(ds, kd) * scale
    dk = (torch.matmul(ds.transpose(-1, -2), qd) * scale).reshape(B, Hkv, G, Sk, D).sum(2)
    dv = torch.matmul(p.transpose(-1, -2), do).reshape(B, Hkv, G, Sk, D).sum(2)
    return dq, dk, dv


BWD_OP = define(
    "attention_backward", "Tensor q, Tensor k, Tensor v, Tensor? mask, bool causal, float scale, Tensor out, "
    "Tensor lse, Tensor dout, Tensor? dlse, str? config", ("dq", "dk", "dv"), shapes=_shapes, launch=_launch,
    reference=lambda q, k, v, mask, causal, scale, out, lse, dout, dlse, cfg: attention_backward_ref(
        q, k, v, mask, causal, scale, out, lse, dout, dlse))


def _setup(ctx, inputs, output):
    q, k, v, mask, causal, scale, return_lse, _ = inputs
    if ctx.needs_input_grad[3]:
        raise TypeError("tilejit::attention: the mask is boolean and has no gradient")
    if not return_lse:
        raise RuntimeError("tilejit::attention: a gradient needs the forward's logsumexp: call it with "
                           "return_lse=True (kernels.attention does so whenever an input requires grad)")
    out, lse = output
    ctx.save_for_backward(q, k, v, mask, out, lse)
    ctx.causal, ctx.scale = causal, scale


def _backward(ctx, dout, dlse):
    q, k, v, mask, out, lse = ctx.saved_tensors
    dq, dk, dv = BWD_OP(q, k, v, mask, ctx.causal, ctx.scale, out, lse, dout, dlse, None)
    return dq, dk, dv, None, None, None, None, None


set_backward("attention", _setup, _backward)


# ---------------------------------------------------------------------------------------------
# the op spec: keyed like the forward (head_dim, seq_k); every block size is bit-neutral
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    cfg = dict(cfg)
    cfg["BLOCK_N"] = min(cfg["BLOCK_N"], max(16, npow2(dims["seq_k"])))
    if dims.get("seq_q") is not None:
        cfg["BLOCK_M"] = min(cfg["BLOCK_M"], max(16, npow2(dims["seq_q"])))
    bd = npow2(dims["head_dim"])
    for key in ("BLOCK_DK", "BLOCK_DO"):
        cfg[key] = min(cfg.get(key, bd), bd)
    return cfg


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    hkv = s.get("kv_heads", s["heads"])
    q = torch.randn(s["batch"], s["heads"], s["seq_q"], s["head_dim"], generator=g)
    k = torch.randn(s["batch"], hkv, s["seq_k"], s["head_dim"], generator=g)
    v = torch.randn(s["batch"], hkv, s["seq_k"], s["head_dim"], generator=g)
    do = torch.randn(q.shape, generator=g)
    causal, scale = bool(s.get("causal", False)), 1.0 / math.sqrt(s["head_dim"])
    out, lse = attention_ref(q, k, v, causal, scale, True, torch.float32)

    def eager():
        qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
        torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal,
                                                         enable_gqa=hkv != s["heads"]).backward(do)
        return qr.grad
    return Problem(run=lambda cfg: BWD_OP(q, k, v, None, causal, scale, out, lse, do, None, encode_config(cfg))[0],
                   ref=lambda: attention_backward_ref(q, k, v, None, causal, scale, out, lse, do, None)[0],
                   eager=eager if not causal or s["seq_q"] == s["seq_k"] else None)


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    d = int(shape.get("head_dim", 64))
    q = torch.empty(1, 1, 2 * cfg["BLOCK_M"], d, dtype=dt)
    kv = torch.empty(1, 1, 2 * cfg["BLOCK_N"], d, dtype=dt)
    lse = torch.empty(q.shape[:3])
    BWD_OP(q, kv, kv, None, bool(shape.get("causal", False)), 0.125, q, lse, q, None, encode_config(cfg))


def _work(cfg: dict, s: dict) -> Work:
    bm, bn, d = cfg["BLOCK_M"], cfg["BLOCK_N"], s["head_dim"]
    qb, kb = cdiv(s["seq_q"], bm), cdiv(s["seq_k"], bn)
    hkv = s.get("kv_heads", s["heads"])
    return Work(programs=s["batch"] * (s["heads"] * qb + hkv * kb),
                elements=(kb + qb) * (bm + bn) * d * 2, segments=(kb + qb) * (bm + bn) * 2,
                flops=8 * bm * bn * d * (kb + qb))


ATTENTION_BACKWARD = OpSpec(
    name="attention_backward",
    key_dims={"head_dim": "exact", "seq_k": "pow2"},
    space=tuple({"BLOCK_M": bm, "BLOCK_N": bn} for bm in (16, 32, 64) for bn in (16, 32, 64)),
    spaces={"scratchpad": tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_DK": 16, "BLOCK_DO": 16}
                                for bm in (2, 4) for bn in (2, 4))},
    defaults={"cache": {"BLOCK_M": 32, "BLOCK_N": 32},
              "scratchpad": {"BLOCK_M": 4, "BLOCK_N": 4, "BLOCK_DK": 16, "BLOCK_DO": 16},
              "simt": {"BLOCK_M": 64, "BLOCK_N": 64}},
    clamp=_clamp,
    dims_of=lambda s: {"head_dim": s["head_dim"], "seq_k": s["seq_k"], "seq_q": s["seq_q"]},
    problem=_problem,
    describe=lambda s: f"({s['batch']},{s['heads']},{s['seq_q']},{s['head_dim']}) kv{s['seq_k']}"
                       + (" causal" if s.get("causal") else ""),
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "train", "batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 256, "seq_k": 256,
                  "head_dim": 64, "causal": True},),
    quick_shapes=({"label": "tiny", "batch": 1, "heads": 2, "seq_q": 16, "seq_k": 16, "head_dim": 32,
                   "causal": True},),
    bit_neutral=frozenset({"BLOCK_M", "BLOCK_N", "BLOCK_DK", "BLOCK_DO"}),
)
SPECS = (ATTENTION_BACKWARD,)

__all__ = ["attention_backward_ref", "attention_bwd_delta_kernel", "attention_bwd_dq_kernel",
           "attention_bwd_dkdv_kernel", "BWD_OP", "ATTENTION_BACKWARD", "SPECS"]
