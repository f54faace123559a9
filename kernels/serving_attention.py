"""Decode attention for serving: one new query token per request over its KV history, read from
a paged KV cache (through block tables) or from a dense variable-length KV (cu_seqlens_k), with
split-KV whose split size is a fixed constant.

q: [B, Hq, D] (the `[tokens, heads, head_dim]` layout, one token per request); paged:
k_cache/v_cache [num_blocks, page_size, Hkv, D] (as kernels/kv_cache.py writes them),
block_tables [B, max_pages] (int32/int64), seq_lens [B]; dense: k/v [total_tokens, Hkv, D] and
cu_seqlens_k [B + 1]. GQA: query head h reads kv head h // (Hq // Hkv). Masks: the query is at
position seq_len - 1, so every key is visible (causal); `window` > 0 keeps the last `window` keys
(sliding window); `soft_cap` > 0 maps each scaled score s to cap * tanh(s / cap) (tanh(u) =
2 sigmoid(2u) - 1). A request of length 0 gets an output of 0.

Numerics (fixed by construction, whatever the batch): the keys of a request are cut into splits of
KV_SPLIT = 256 keys, a constant, never a function of the batch or the number of requests. Stage 1
runs one program per (request, head, split): an online softmax over the split's keys in ascending
BLOCK_N blocks (running max, running sum and an fp32 accumulator rescaled by exp(m_old - m_new))
and stores the split's normalised output and logsumexp. Stage 2 runs one program per (request,
head) and folds the splits in ascending order with the same online rule. A key's address (through
the block table, or a dense offset) is the only thing paged and dense attention do differently,
so on the same tokens they give equal bits, and so do different page assignments; a request's
programs read only its own keys, so its output is bitwise the same in any batch.
"""
from __future__ import annotations

import math

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device, check_same_dtype, check_tensor
from .configs import select
from .indices import check_range, index_tensor

KV_SPLIT = 256          # keys per split: a constant (batch invariance), a multiple of every BLOCK_N
STRICT_BLOCK_N = 8      # strict: BLOCK_N fixes the order of the softmax sums, one value on every target
                        # (8: the strict reduction trees of a head_dim-32 tile fit Kunlun LM)


@kernel
def _softcap(s, cap):
    return cap * (2.0 * tl.sigmoid(2.0 * (s / cap)) - 1.0)


@kernel
def decode_split_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, len_ptr, cu_ptr, po_ptr, plse_ptr,
                        Hq, GROUP, D, scale, cap, window, PAGE, sqb, sqh, skt, skh, svt, svh, sbt, S_MAX,
                        PAGED: tl.constexpr, SOFTCAP: tl.constexpr, SPLIT: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    sp = tl.program_id(2)
    hk = h // GROUP
    if PAGED:
        L = tl.load(len_ptr + b)
        base = 0
    else:
        base = tl.load(cu_ptr + b)
        L = tl.load(cu_ptr + b + 1) - base
    lo = tl.where(window > 0, tl.maximum(L - window, 0), 0)
    start = sp * SPLIT
    end = tl.minimum(start + SPLIT, L)
    d = tl.arange(0, BLOCK_D)
    dm = d < D
    q = tl.load(q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh + d, mask=dm, other=0.0).to(tl.float32) * scale
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        j = n0 + tl.arange(0, BLOCK_N)
        valid = (j < end) & (j >= lo)
        if PAGED:
            page = tl.load(bt_ptr + b.to(tl.int64) * sbt + j // PAGE, mask=j < end, other=0)
            row = page.to(tl.int64) * PAGE + j % PAGE
        else:
            row = (base + j).to(tl.int64)
        km = valid[:, None] & dm[None, :]
        k = tl.load(k_ptr + row[:, None] * skt + hk.to(tl.int64) * skh + d[None, :], mask=km, other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], axis=1)
        if SOFTCAP:
            s = _softcap(s, cap)
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.where(valid, tl.exp(s - m_safe), 0.0)
        alpha = tl.exp(m_i - m_safe)
        v = tl.load(v_ptr + row[:, None] * svt + hk.to(tl.int64) * svh + d[None, :], mask=km, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    o = tl.where(l_i > 0.0, acc / tl.where(l_i > 0.0, l_i, 1.0), 0.0)
    lse = tl.where(l_i > 0.0, m_i + tl.log(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
    slot = (b.to(tl.int64) * Hq + h) * S_MAX + sp
    tl.store(po_ptr + slot * BLOCK_D + d, o)
    tl.store(plse_ptr + slot, lse)


@kernel
def decode_combine_kernel(po_ptr, plse_ptr, len_ptr, cu_ptr, o_ptr, Hq, D, sob, soh, S_MAX,
                          PAGED: tl.constexpr, SPLIT: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    if PAGED:
        L = tl.load(len_ptr + b)
    else:
        L = tl.load(cu_ptr + b + 1) - tl.load(cu_ptr + b)
    d = tl.arange(0, BLOCK_D)
    first = (b.to(tl.int64) * Hq + h) * S_MAX
    m_i = float("-inf")
    w = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for sp in range(0, (L + SPLIT - 1) // SPLIT):
        lse = tl.load(plse_ptr + first + sp)
        o = tl.load(po_ptr + (first + sp) * BLOCK_D + d)
        m_new = tl.maximum(m_i, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        a = tl.exp(m_i - m_safe)
        e = tl.exp(lse - m_safe)
        acc = acc * a + o * e
        w = w * a + e
        m_i = m_new
    out = tl.where(w > 0.0, acc / tl.where(w > 0.0, w, 1.0), 0.0)
    tl.store(o_ptr + b.to(tl.int64) * sob + h.to(tl.int64) * soh + d, out.to(o_ptr.dtype.element_ty), mask=d < D)


def _check_q(op, q, k_like, out):
    check_tensor(op, "q", q, dims=3)
    if q.stride(2) != 1:
        raise ValueError(f"{op}: argument 'q' must have a contiguous last dim (stride 1)")
    Hq, D = q.shape[1], q.shape[2]
    Hkv = k_like.shape[-2]
    if k_like.shape[-1] != D:
        raise ValueError(f"{op}: the kv head_dim {k_like.shape[-1]} differs from q's {D}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"{op}: the {Hkv} kv heads must divide the {Hq} query heads (GQA)")
    if out is not None:
        check_tensor(op, "out", out, dims=3)
        if out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1:
            raise ValueError(f"{op}: out must be a {q.dtype} tensor of q's shape {tuple(q.shape)} with a "
                             f"contiguous last dim, got {out.dtype} {tuple(out.shape)}")
    return Hq // Hkv


def _check_kv(op, name, t, q, ndim):
    check_tensor(op, name, t, dims=ndim)
    check_same_dtype(op, "q", q, **{name: t})
    if t.stride(-1) != 1 or t.stride(-2) != t.shape[-1] or (ndim == 4 and t.stride(0) != t.shape[1] * t.stride(1)):
        raise ValueError(f"{op}: argument '{name}' must be contiguous over its last two dims"
                         + (" and its pages" if ndim == 4 else ""))


def _options(op, scale, soft_cap, window, D):
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    for name, val in (("scale", scale), ("soft_cap", soft_cap)):
        if not isinstance(val, (int, float)) or isinstance(val, bool) or val < 0 or (name == "scale" and val == 0):
            raise ValueError(f"{op}: {name} must be a {'positive' if name == 'scale' else 'non-negative'} number, "
                             f"got {val!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"{op}: window must be a non-negative int (0: no sliding window), got {window!r}")
    return float(scale), float(soft_cap), int(window)


def _launch(q, k, v, bt, lens, cu, page, max_len, group, scale, cap, window, out, config):
    B, Hq, D = q.shape
    o = torch.empty_like(q) if out is None else out
    if B == 0:
        return o
    cfg = _clamp(dict(config), {"head_dim": D}) if config else select(SPEC, None, head_dim=D)   # BLOCK_D follows D
    n_split = max(1, cdiv(max_len, KV_SPLIT))
    bd = cfg["BLOCK_D"]
    po = torch.empty(B, Hq, n_split, bd, dtype=torch.float32, device=q.device)
    plse = torch.empty(B, Hq, n_split, dtype=torch.float32, device=q.device)
    paged = bt is not None
    dummy = lens if paged else cu
    decode_split_kernel[(B, Hq, n_split)](
        q, k, v, bt if paged else dummy, dummy, dummy, po, plse, Hq, group, D, scale, cap or 1.0, window, page,
        q.stride(0), q.stride(1), k.stride(-3), k.stride(-2), v.stride(-3), v.stride(-2),
        bt.stride(0) if paged else 0, n_split, PAGED=paged, SOFTCAP=cap > 0, SPLIT=KV_SPLIT, **cfg)
    decode_combine_kernel[(B, Hq)](po, plse, dummy, dummy, o, Hq, D, o.stride(0), o.stride(1), n_split,
                                   PAGED=paged, SPLIT=KV_SPLIT, BLOCK_D=bd)
    return o


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, soft_cap=0.0, window=0,
                           out=None, config=None):
    """Attention of q [B, Hq, D] over each request's seq_lens[b] keys read through block_tables."""
    op = "paged_decode_attention"
    check_tensor(op, "q", q, dims=3)
    _check_kv(op, "k_cache", k_cache, q, 4)
    _check_kv(op, "v_cache", v_cache, q, 4)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"{op}: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
    group = _check_q(op, q, k_cache, out)
    scale, cap, window = _options(op, scale, soft_cap, window, q.shape[2])
    bt = index_tensor(op, "block_tables", block_tables, dims=2)
    lens = index_tensor(op, "seq_lens", seq_lens, dims=1)
    B, page = q.shape[0], k_cache.shape[1]
    if bt.shape[0] != B or lens.shape[0] != B:
        raise ValueError(f"{op}: block_tables has {bt.shape[0]} rows and seq_lens {lens.shape[0]} entries; "
                         f"expected one per request ({B})")
    check_range(op, "seq_lens", lens, 0, bt.shape[1] * page + 1)
    used = torch.arange(bt.shape[1], device=bt.device)[None, :] < ((lens + page - 1) // page)[:, None]
    check_range(op, "block_tables", bt[used], 0, k_cache.shape[0])
    check_device(op, q=q, k_cache=k_cache, v_cache=v_cache, block_tables=bt, seq_lens=lens, out=out)
    max_len = int(lens.max().item()) if B else 0
    return _launch(q, k_cache, v_cache, bt, lens, None, page, max_len, group, scale, cap, window, out, config)


def decode_attention(q, k, v, cu_seqlens_k, *, scale=None, soft_cap=0.0, window=0, out=None, config=None):
    """Attention of q [B, Hq, D] over the dense keys k[cu_seqlens_k[b]:cu_seqlens_k[b+1]] ([total, Hkv, D])."""
    op = "decode_attention"
    check_tensor(op, "q", q, dims=3)
    _check_kv(op, "k", k, q, 3)
    _check_kv(op, "v", v, q, 3)
    if k.shape != v.shape:
        raise ValueError(f"{op}: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    group = _check_q(op, q, k, out)
    scale, cap, window = _options(op, scale, soft_cap, window, q.shape[2])
    cu = index_tensor(op, "cu_seqlens_k", cu_seqlens_k, dims=1)
    if cu.shape[0] != q.shape[0] + 1:
        raise ValueError(f"{op}: cu_seqlens_k has {cu.shape[0]} entries, expected batch + 1 = {q.shape[0] + 1}")
    lens = cu[1:] - cu[:-1]
    if cu.numel() and (cu[0].item() < 0 or cu[-1].item() > k.shape[0] or (lens < 0).any().item()):
        raise ValueError(f"{op}: cu_seqlens_k must be non-decreasing offsets into k's {k.shape[0]} tokens")
    check_device(op, q=q, k=k, v=v, cu_seqlens_k=cu, out=out)
    max_len = int(lens.max().item()) if q.shape[0] else 0
    return _launch(q, k, v, None, None, cu, 1, max_len, group, scale, cap, window, out, config)


def decode_attention_ref(q, ks, vs, *, scale=None, soft_cap=0.0, window=0, out_dtype=None):
    """fp64 reference: ks[b], vs[b] are request b's keys/values [L_b, Hkv, D]."""
    B, Hq, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    outs = []
    for b in range(B):
        k, v = ks[b].double(), vs[b].double()
        L, Hkv = k.shape[0], k.shape[1]
        if window:
            k, v = k[max(0, L - window):], v[max(0, L - window):]
        if k.shape[0] == 0:
            outs.append(torch.zeros(Hq, D, dtype=torch.float64))
            continue
        k, v = k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)
        s = torch.einsum("hd,nhd->hn", q[b].double() * scale, k)
        if soft_cap:
            s = soft_cap * torch.tanh(s / soft_cap)
        outs.append(torch.einsum("hn,nhd->hd", torch.softmax(s, -1), v))
    return torch.stack(outs).to(out_dtype or q.dtype)


# ---------------------------------------------------------------------------------------------
# op spec (paged and dense decode share it: the same kernels)
# ---------------------------------------------------------------------------------------------
def _paged_inputs(s: dict, g):
    B, Hq, Hkv, D, L, page = s["batch"], s["heads"], s["kv_heads"], s["head_dim"], s["seq_k"], s.get("page_size", 16)
    q = torch.randn(B, Hq, D, generator=g)
    pages = cdiv(L, page)
    kc = torch.randn(B * pages, page, Hkv, D, generator=g)
    vc = torch.randn(B * pages, page, Hkv, D, generator=g)
    bt = torch.randperm(B * pages, generator=g).reshape(B, pages)
    return q, kc, vc, bt, torch.full((B,), L)


def _gather(kc, bt, lens):
    return [kc[bt[b]].reshape(-1, *kc.shape[2:])[: int(lens[b])] for b in range(bt.shape[0])]


def _problem(s: dict) -> Problem:
    q, kc, vc, bt, lens = _paged_inputs(s, torch.Generator().manual_seed(0))
    return Problem(run=lambda cfg: paged_decode_attention(q, kc, vc, bt, lens, config=cfg),
                   ref=lambda: decode_attention_ref(q, _gather(kc, bt, lens), _gather(vc, bt, lens),
                                                    out_dtype=torch.float64),
                   eager=None)


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    D = shape.get("head_dim", 64)
    q, kc = torch.zeros(1, 2, D, dtype=dt), torch.zeros(2, 16, 1, D, dtype=dt)
    for cap in (0.0, 30.0):
        paged_decode_attention(q, kc, kc, torch.tensor([[0, 1]], dtype=torch.int32),
                               torch.tensor([20], dtype=torch.int32), soft_cap=cap, config=cfg)


def _clamp(cfg: dict, dims: dict) -> dict:
    """BLOCK_D is head_dim's power of two (not a choice)."""
    return {**cfg, "BLOCK_D": max(16, npow2(dims["head_dim"]))}


def _work(cfg: dict, s: dict) -> Work:
    L, D = s["seq_k"], s["head_dim"]
    return Work(programs=s["batch"] * s["heads"] * cdiv(L, KV_SPLIT), elements=2 * min(L, KV_SPLIT) * D + D,
                segments=2 * cdiv(min(L, KV_SPLIT), 1), flops=4 * min(L, KV_SPLIT) * D)


SPEC = OpSpec(
    name="decode_attention",
    key_dims={"head_dim": "exact"},   # never the batch, the request count or the KV length
    space=tuple({"BLOCK_N": bn} for bn in (16, 32, 64)),
    spaces={"scratchpad": tuple({"BLOCK_N": bn} for bn in (8, 16))},
    defaults={"cache": {"BLOCK_N": 32}, "scratchpad": {"BLOCK_N": 8},
              "simt": {"BLOCK_N": 64}},
    clamp=_clamp,
    dims_of=lambda s: {"head_dim": s["head_dim"]},
    problem=_problem,
    describe=lambda s: f"{s['batch']} req x {s['heads']}/{s['kv_heads']} heads x {s['head_dim']}, kv {s['seq_k']}",
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "decode", "batch": 8, "heads": 32, "kv_heads": 8, "head_dim": 128, "seq_k": 1024},),
    quick_shapes=({"label": "tiny", "batch": 2, "heads": 2, "kv_heads": 1, "head_dim": 32, "seq_k": 40,
                   "page_size": 8},),
    strict_fixed={"BLOCK_N": STRICT_BLOCK_N},
)
SPECS = (SPEC,)

__all__ = ["paged_decode_attention", "decode_attention", "decode_attention_ref", "decode_split_kernel",
           "decode_combine_kernel", "KV_SPLIT", "STRICT_BLOCK_N", "SPEC", "SPECS"]
