"""Attention for serving: variable-length prefill, prefill over a cached prefix ("extend") and
decode, over a dense variable-length KV (cu_seqlens_k) or a paged KV cache (block tables), with
split-KV whose split size is a fixed constant, so that decode equals prefill bitwise.

Layout (the `[tokens, heads, head_dim]` one engines use): q [total_q, Hq, D] with cu_seqlens_q
[B + 1] (request b owns rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]; decode is one row per request);
dense: k/v [total_k, Hkv, D] with cu_seqlens_k [B + 1]; paged: k_cache/v_cache
[num_blocks, page_size, Hkv, D] (as kernels/kv_cache.py writes them), block_tables [B, max_pages]
(int32/int64) and seq_lens [B], the KV length of each request including its new tokens. GQA: query
head h reads kv head h // (Hq // Hkv).

Masks: query row i of a request with Lq queries and Lk keys sits at key position p = Lk - Lq + i
(bottom-right aligned: the new tokens are the last ones; for Lq == Lk this is the usual causal
prefill, for Lq == 1 decode). `causal` keeps keys j <= p; `window` > 0 (with causal) keeps the last
`window` of them, p - window < j; `soft_cap` > 0 maps each scaled score s to cap * tanh(s / cap)
(tanh(u) = 2 sigmoid(2u) - 1); per-request key lengths are the padding mask. A row that sees no key
gets an output of 0.

Numerics, fixed by construction whatever the batch: a request's keys are cut into splits of
KV_SPLIT = 256 keys (a constant, never a function of the batch, of the number of requests or of the
number of queries). A program owns BLOCK_M rows of one request and one kv head (a row is a (query,
head of the GQA group) pair, so the group's heads share each K/V tile). For each split it runs an
online softmax over the split's keys in ascending BLOCK_N blocks (running max, running sum, an fp32
accumulator rescaled by exp(m_old - m_new); scores are one fma chain over head_dim in ascending
order, `dot`), normalises it to (output, logsumexp) and folds that into a running combination of
the splits, in ascending split order (`_fold`). With few rows and long keys (decode) the splits run
as parallel programs that store their (output, logsumexp) and a second kernel folds them in the same
order with the same `_fold`: folding one part is exact (weight 1), so both schedules give the same
bits. Blocks and splits a row cannot see are skipped, which is exact too (they would fold with
weight 0). Every operation on a row is therefore the same in prefill and decode, alone or in any
batch, paged or dense, whatever BLOCK_M: a decode step equals the same position of a prefill, and a
different page assignment of the same tokens gives the same bits.
"""
from __future__ import annotations

import math

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device, check_same_dtype, check_tensor
from .configs import narrow_dots, select
from .indices import check_range, in_range, index_tensor
from .outputs import new_output_like

KV_SPLIT = 256          # keys per split: a constant (batch invariance), a multiple of every BLOCK_N
STRICT_BLOCK_N = 8      # strict: BLOCK_N fixes the order of the softmax sums, one value on every target


@kernel
def _softcap(s, cap):
    return cap * (2.0 * tl.sigmoid(2.0 * (s / cap)) - 1.0)


@kernel
def _fold(m_c, w_c, acc_c, lse, o):
    """Fold one part (its normalised output o and logsumexp lse per row) into the running
    combination (max m_c, weight w_c, weighted sum acc_c); a part with lse = -inf changes nothing."""
    m_new = tl.maximum(m_c, lse)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    a = tl.exp(m_c - m_safe)
    e = tl.exp(lse - m_safe)
    return m_new, w_c * a + e, acc_c * a[:, None] + o * e[:, None]


@kernel
def _normalised(m, weight, acc):
    """(acc / weight, m + log(weight)) per row; a row with weight 0 (no key) gives (0, -inf)."""
    has = weight != 0.0    # NaN (a NaN score) propagates, as in torch
    safe = tl.where(has, weight, 1.0)
    return tl.where(has[:, None], acc / safe[:, None], 0.0), tl.where(has, m + tl.log(safe), float("-inf"))


@kernel
def _key_range(Lq, Lk, pid_m, GROUP, window, part, PARTS, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
               SPLIT: tl.constexpr):
    """The keys [lo, hi) some row of the program sees, and the splits [sp_lo, sp_hi) it walks."""
    hi = Lk
    if CAUSAL:
        hi = tl.minimum(Lk, Lk - Lq + (tl.minimum(pid_m * BLOCK_M + BLOCK_M, Lq * GROUP) + GROUP - 1) // GROUP)
    lo = tl.where(window > 0, tl.maximum(Lk - Lq + (pid_m * BLOCK_M) // GROUP - window + 1, 0), 0)
    sp_lo = lo // SPLIT
    sp_hi = (hi + SPLIT - 1) // SPLIT
    if PARTS > 1:   # one split per program
        sp_lo = tl.maximum(sp_lo, part)
        sp_hi = tl.minimum(sp_hi, part + 1)
    return lo, hi, sp_lo, sp_hi


@kernel
def _online_softmax_step(m_i, l_i, acc, s, v, NARROW_DOT: tl.constexpr):
    """One key block (scores s, -inf where masked; values v) into the running max, sum and output;
    with NARROW_DOT, p enters the P.V dot rounded to v's dtype (kernels/attention.py)."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    # a row that has seen no key yet keeps m = -inf; rescale it against 0 to avoid inf - inf
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_ref[:, None])
    alpha = tl.exp(m_i - m_ref)
    if NARROW_DOT:
        return m_new, l_i * alpha + tl.sum(p, axis=1), tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l_i * alpha + tl.sum(p, axis=1), tl.dot(p, v.to(tl.float32), acc * alpha[:, None])


@kernel
def _chunked_scores(q_rows, r_ok, k_head, key, j_ok, skt, scale, D, NARROW_DOT: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr):
    """(q * scale) . k^T over head_dim in chunks of BLOCK_DK chained into one accumulator: the same
    fma chain as one dot over BLOCK_D, for targets whose local memory cannot hold whole rows. With
    NARROW_DOT, q . k^T of the loaded dtypes, then times the scale."""
    s = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, BLOCK_D, BLOCK_DK):
        offs_dk = d0 + tl.arange(0, BLOCK_DK)
        dk_ok = offs_dk < D
        q_c = tl.load(q_rows + offs_dk[None, :], mask=r_ok[:, None] & dk_ok[None, :], other=0.0)
        kt_c = tl.load(k_head + key[None, :] * skt + offs_dk[:, None], mask=dk_ok[:, None] & j_ok[None, :],
                       other=0.0)
        if NARROW_DOT:
            s = tl.dot(q_c, kt_c, s)
        else:
            s = tl.dot(q_c.to(tl.float32) * scale, kt_c.to(tl.float32), s)
    if NARROW_DOT:
        s = s * scale
    return s


@kernel
def _query(q, scale, NARROW_DOT: tl.constexpr):
    """q as the scores' dot takes it: as loaded (NARROW_DOT), else scaled in fp32."""
    if NARROW_DOT:
        return q
    return q.to(tl.float32) * scale


@kernel
def _scores(q, kt, scale, NARROW_DOT: tl.constexpr):
    """q . k^T of one key block: of the loaded dtypes, then scaled (NARROW_DOT), else of q already
    scaled in fp32 and k widened."""
    if NARROW_DOT:
        return tl.dot(q, kt) * scale
    return tl.dot(q, kt.to(tl.float32))


# NARROW_DOT (fp16/bf16, fast policy, a target with `Caps.narrow_dots`): q, k and v enter the dots in
# their own dtype, the scale multiplies the scores, and p is rounded to v's dtype, as in
# kernels/attention.py.
@kernel
def serving_attention_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, cuq_ptr, cuk_ptr, o_ptr, lse_ptr,
                             GROUP, Hkv, D, scale, cap, window, PAGE, PARTS,
                             sqt, sqh, skt, skh, svt, svh, sbt, sot, soh, sop,
                             PAGED: tl.constexpr, CAUSAL: tl.constexpr, SOFTCAP: tl.constexpr,
                             SPLIT: tl.constexpr, NARROW_DOT: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr,
                             BLOCK_DO: tl.constexpr):
    """One program: BLOCK_M rows x BLOCK_DO output columns of one request and kv head, over all
    the splits its rows see (PARTS == 1) or over split number `part` only (PARTS > 1)."""
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // Hkv
    hk = tl.program_id(1) % Hkv
    part = tl.program_id(2) // (BLOCK_D // BLOCK_DO)
    pid_d = tl.program_id(2) % (BLOCK_D // BLOCK_DO)
    q0 = tl.load(cuq_ptr + b)
    Lq = tl.load(cuq_ptr + b + 1) - q0
    if PAGED:
        k0 = 0
        Lk = tl.load(lens_ptr + b)
    else:
        k0 = tl.load(cuk_ptr + b)
        Lk = tl.load(cuk_ptr + b + 1) - k0
    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < Lq * GROUP
    tok = (q0 + r // GROUP).to(tl.int64)
    h = hk * GROUP + r % GROUP
    pos = Lk - Lq + r // GROUP
    lo, hi, sp_lo, sp_hi = _key_range(Lq, Lk, pid_m, GROUP, window, part, PARTS, CAUSAL, BLOCK_M, SPLIT)

    offs_do = pid_d * BLOCK_DO + tl.arange(0, BLOCK_DO)
    do_ok = offs_do < D
    q_rows = q_ptr + tok[:, None] * sqt + h[:, None].to(tl.int64) * sqh
    if BLOCK_DK == BLOCK_D:   # q stays in registers/local memory for the whole key loop
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q = _query(tl.load(q_rows + offs_d[None, :], mask=r_ok[:, None] & d_ok[None, :], other=0.0), scale,
                   NARROW_DOT)
    k_head = k_ptr + hk.to(tl.int64) * skh
    v_head = v_ptr + hk.to(tl.int64) * svh

    m_c = tl.full([BLOCK_M], float("-inf"), tl.float32)
    w_c = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc_c = tl.zeros((BLOCK_M, BLOCK_DO), dtype=tl.float32)
    for sp in range(sp_lo, sp_hi):
        end = tl.minimum(sp * SPLIT + SPLIT, hi)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_DO), dtype=tl.float32)
        for n0 in range(tl.maximum(sp * SPLIT, lo // BLOCK_N * BLOCK_N), end, BLOCK_N):
            j = n0 + tl.arange(0, BLOCK_N)
            j_ok = j < end
            if PAGED:   # the key's row in the cache, through the block table
                page = tl.load(bt_ptr + b.to(tl.int64) * sbt + j // PAGE, mask=j_ok, other=0)
                key = page.to(tl.int64) * PAGE + j % PAGE
            else:
                key = (k0 + j).to(tl.int64)
            if BLOCK_DK == BLOCK_D:
                kt = tl.load(k_head + key[None, :] * skt + offs_d[:, None], mask=d_ok[:, None] & j_ok[None, :],
                             other=0.0)
                s = _scores(q, kt, scale, NARROW_DOT)
            else:
                s = _chunked_scores(q_rows, r_ok, k_head, key, j_ok, skt, scale, D, NARROW_DOT, BLOCK_M, BLOCK_N,
                                    BLOCK_D, BLOCK_DK)
            if SOFTCAP:
                s = _softcap(s, cap)
            valid = r_ok[:, None] & j_ok[None, :]
            if CAUSAL:
                valid = valid & (j[None, :] <= pos[:, None])
            valid = valid & ((window <= 0) | (j[None, :] > pos[:, None] - window))
            v = tl.load(v_head + key[:, None] * svt + offs_do[None, :], mask=j_ok[:, None] & do_ok[None, :],
                        other=0.0)
            m_i, l_i, acc = _online_softmax_step(m_i, l_i, acc, tl.where(valid, s, float("-inf")), v, NARROW_DOT)
        o, lse = _normalised(m_i, l_i, acc)
        m_c, w_c, acc_c = _fold(m_c, w_c, acc_c, lse, o)
    out, lse = _normalised(m_c, w_c, acc_c)
    tl.store(o_ptr + tok[:, None] * sot + h[:, None].to(tl.int64) * soh + part * sop + offs_do[None, :],
             out.to(o_ptr.dtype.element_ty), mask=r_ok[:, None] & do_ok[None, :])
    if PARTS > 1:
        first_d = (r * 0 + pid_d) == 0   # one program of the row's column blocks stores it
        tl.store(lse_ptr + (tok * (Hkv * GROUP) + h) * PARTS + part, lse, mask=r_ok & first_d)


@kernel
def serving_combine_kernel(po_ptr, plse_ptr, o_ptr, Hq, D, ROWS, PARTS, sot, soh,
                           BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rows (token * Hq + head) of parallel split parts folded in ascending part order."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < ROWS
    rl = r.to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    m_c = tl.full([BLOCK_M], float("-inf"), tl.float32)
    w_c = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc_c = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for part in range(0, PARTS):
        lse = tl.load(plse_ptr + rl * PARTS + part, mask=r_ok, other=float("-inf"))
        o = tl.load(po_ptr + (rl * PARTS + part)[:, None] * BLOCK_D + d[None, :], mask=r_ok[:, None], other=0.0)
        m_c, w_c, acc_c = _fold(m_c, w_c, acc_c, lse, o)
    out, _ = _normalised(m_c, w_c, acc_c)
    tl.store(o_ptr + (rl // Hq)[:, None] * sot + (rl % Hq)[:, None] * soh + d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=r_ok[:, None] & (d < D)[None, :])


# ---------------------------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------------------------
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


def _options(op, causal, scale, soft_cap, window, D):
    if not isinstance(causal, bool):
        raise TypeError(f"{op}: argument 'causal' must be a bool, got {type(causal).__name__}")
    scale = (1.0 / math.sqrt(D) if D else 1.0) if scale is None else scale
    for name, val in (("scale", scale), ("soft_cap", soft_cap)):
        if (not isinstance(val, (int, float)) or isinstance(val, bool) or not math.isfinite(val) or val < 0
                or (name == "scale" and val == 0)):
            raise ValueError(f"{op}: {name} must be a {'positive' if name == 'scale' else 'non-negative'} finite "
                             f"number, got {val!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"{op}: window must be a non-negative int (0: no sliding window), got {window!r}")
    if window and not causal:
        raise ValueError(f"{op}: a sliding window (window={window}) needs causal=True: it keeps the last "
                         f"`window` keys up to each query's position")
    return float(scale), float(soft_cap), int(window)


def _offsets(op, name, cu, batch, total, *, exact):
    """cu_seqlens checked: batch + 1 non-decreasing offsets from 0 into `total` rows (ending at
    `total` when `exact`); returns (cu, the longest length)."""
    cu = index_tensor(op, name, cu, dims=1)
    if cu.shape[0] != batch + 1:
        raise ValueError(f"{op}: {name} has {cu.shape[0]} entries, expected batch + 1 = {batch + 1}")
    lens = cu[1:] - cu[:-1]
    first, last = int(cu[0].item()), int(cu[-1].item())
    if first != 0 or (lens < 0).any().item() or last > total or (exact and last != total):
        raise ValueError(f"{op}: {name} must be non-decreasing offsets from 0 to "
                         f"{'' if exact else 'at most '}{total} (the rows of the {'q' if exact else 'k/v'} "
                         f"tensor), got {cu.tolist() if cu.numel() <= 8 else f'{first} .. {last}'}")
    return cu, int(lens.max().item()) if batch else 0


def _batch_of(op, q, cu_seqlens_q):
    """cu_seqlens_q checked against q's rows; None (decode) means one row per request."""
    if cu_seqlens_q is None:
        return torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device), 1
    cu_seqlens_q = torch.as_tensor(cu_seqlens_q) if not isinstance(cu_seqlens_q, torch.Tensor) else cu_seqlens_q
    return _offsets(op, "cu_seqlens_q", cu_seqlens_q, cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else 0,
                    q.shape[0], exact=True)


# ---------------------------------------------------------------------------------------------
# launch
# ---------------------------------------------------------------------------------------------
def _launch(op, q, k, v, cu_q, max_q, kv, max_k, group, causal, scale, cap, window, out, config, parallel):
    """kv: ("paged", block_tables, seq_lens, page) or ("dense", cu_seqlens_k)."""
    total, Hq, D = q.shape
    o = new_output_like(q) if out is None else out
    B = cu_q.shape[0] - 1
    if total == 0 or B == 0:
        return o
    rows, narrow = max_q * group, narrow_dots(q.dtype)
    cfg = select(SPEC, None, head_dim=D, rows=rows, narrow=narrow)
    if config:
        cfg = _clamp({**cfg, **config}, {"head_dim": D, "rows": rows})
    bm, bd, bdo = cfg["BLOCK_M"], cfg["BLOCK_D"], cfg["BLOCK_DO"]
    if bd % bdo or bd % cfg["BLOCK_DK"]:
        raise ValueError(f"{op}: config BLOCK_DK={cfg['BLOCK_DK']} and BLOCK_DO={bdo} must divide "
                         f"BLOCK_D={bd}")
    n_split = max(1, cdiv(max_k, KV_SPLIT))
    if parallel is None:   # the schedule changes no bit: parallel splits where rows alone give few programs
        parallel = n_split > 1 and rows <= bm
    parts = n_split if parallel else 1
    if parts > 1:
        dst = torch.empty(total, Hq, parts, bd, dtype=torch.float32, device=q.device)
        plse = torch.empty(total, Hq, parts, dtype=torch.float32, device=q.device)
        so = (dst.stride(0), dst.stride(1), dst.stride(2))
    else:
        dst, plse, so = o, None, (o.stride(0), o.stride(1), 0)
    paged = kv[0] == "paged"
    bt, lens, page = (kv[1], kv[2], kv[3]) if paged else (None, None, 1)
    cu_k = None if paged else kv[1]
    serving_attention_kernel[(cdiv(rows, bm), B * k.shape[-2], parts * (bd // bdo))](
        q, k, v, bt, lens, cu_q, cu_k, dst, plse, group, k.shape[-2], D, scale, cap or 1.0, window, page, parts,
        q.stride(0), q.stride(1), k.stride(-3), k.stride(-2), v.stride(-3), v.stride(-2),
        bt.stride(0) if paged else 0, *so, PAGED=paged, CAUSAL=causal, SOFTCAP=cap > 0, SPLIT=KV_SPLIT,
        NARROW_DOT=narrow, **cfg)
    if parts > 1:
        serving_combine_kernel[(cdiv(total * Hq, bm),)](dst, plse, o, Hq, D, total * Hq, parts,
                                                        o.stride(0), o.stride(1), BLOCK_M=bm, BLOCK_D=bd)
    return o


def _paged_kv(op, q, k_cache, v_cache, block_tables, seq_lens):
    _check_kv(op, "k_cache", k_cache, q, 4)
    _check_kv(op, "v_cache", v_cache, q, 4)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"{op}: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
    bt = index_tensor(op, "block_tables", block_tables, dims=2)
    lens = index_tensor(op, "seq_lens", seq_lens, dims=1)
    page = k_cache.shape[1]
    check_range(op, "seq_lens", lens, 0, bt.shape[1] * page + 1)
    if not in_range(bt, 0, k_cache.shape[0]):   # only the entries a request uses must be pages
        used = torch.arange(bt.shape[1], device=bt.device)[None, :] < ((lens + page - 1) // page)[:, None]
        check_range(op, "block_tables", bt[used], 0, k_cache.shape[0])
    return bt, lens, page


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q=None, *, causal=True, scale=None,
                    soft_cap=0.0, window=0, out=None, config=None, _parallel=None, _op="paged_attention"):
    """Attention of the new query rows q [total_q, Hq, D] (request b's rows cu_seqlens_q[b] ..
    cu_seqlens_q[b+1]; None: one row per request, i.e. decode) over each request's seq_lens[b] keys
    read through block_tables (prefill, or extend over a cached prefix). Returns [total_q, Hq, D].
    `_parallel` forces the split schedule (None: chosen by shape; it changes no bit)."""
    op = _op
    check_tensor(op, "q", q, dims=3)
    group = _check_q(op, q, k_cache, out)
    scale, cap, window = _options(op, causal, scale, soft_cap, window, q.shape[2])
    cu_q, max_q = _batch_of(op, q, cu_seqlens_q)
    bt, lens, page = _paged_kv(op, q, k_cache, v_cache, block_tables, seq_lens)
    B = cu_q.shape[0] - 1
    if bt.shape[0] != B or lens.shape[0] != B:
        raise ValueError(f"{op}: block_tables has {bt.shape[0]} rows and seq_lens {lens.shape[0]} entries; "
                         f"expected one per request ({B})")
    check_device(op, q=q, k_cache=k_cache, v_cache=v_cache, block_tables=bt, seq_lens=lens, cu_seqlens_q=cu_q,
                 out=out)
    max_k = int(lens.max().item()) if B else 0
    return _launch(op, q, k_cache, v_cache, cu_q.to(lens.dtype), max_q, ("paged", bt, lens, page), max_k, group,
                   causal, scale, cap, window, out, config, _parallel)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=True, scale=None, soft_cap=0.0, window=0,
                     out=None, config=None, _parallel=None, _op="varlen_attention"):
    """Attention of q [total_q, Hq, D] over the dense keys k/v [total_k, Hkv, D]: request b's queries
    are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q, its keys rows cu_seqlens_k[b] ..
    cu_seqlens_k[b+1] of k and v (cu_seqlens_q None: one query per request, i.e. decode)."""
    op = _op
    check_tensor(op, "q", q, dims=3)
    _check_kv(op, "k", k, q, 3)
    _check_kv(op, "v", v, q, 3)
    if k.shape != v.shape:
        raise ValueError(f"{op}: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    group = _check_q(op, q, k, out)
    scale, cap, window = _options(op, causal, scale, soft_cap, window, q.shape[2])
    cu_q, max_q = _batch_of(op, q, cu_seqlens_q)
    B = cu_q.shape[0] - 1
    cu_k, max_k = _offsets(op, "cu_seqlens_k", cu_seqlens_k, B, k.shape[0], exact=False)
    check_device(op, q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, out=out)
    return _launch(op, q, k, v, cu_q.to(cu_k.dtype), max_q, ("dense", cu_k), max_k, group, causal, scale, cap, window,
                   out, config, _parallel)


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, soft_cap=0.0, window=0,
                           out=None, config=None):
    """Decode: one query q [B, Hq, D] per request over its seq_lens[b] keys read through block_tables."""
    return paged_attention(q, k_cache, v_cache, block_tables, seq_lens, None, scale=scale, soft_cap=soft_cap,
                           window=window, out=out, config=config, _op="paged_decode_attention")


def decode_attention(q, k, v, cu_seqlens_k, *, scale=None, soft_cap=0.0, window=0, out=None, config=None):
    """Decode: one query q [B, Hq, D] per request over the dense keys k[cu_seqlens_k[b]:cu_seqlens_k[b+1]]."""
    return varlen_attention(q, k, v, None, cu_seqlens_k, scale=scale, soft_cap=soft_cap, window=window, out=out,
                            config=config, _op="decode_attention")


def varlen_attention_ref(q, ks, vs, q_lens=None, *, causal=True, scale=None, soft_cap=0.0, window=0, out_dtype=None):
    """fp64 reference: request b's queries are the next q_lens[b] rows of q (None: one each), its
    keys/values ks[b], vs[b] [L_b, Hkv, D]; the same bottom-right positions and masks."""
    total, Hq, D = q.shape
    scale = (1.0 / math.sqrt(D) if D else 1.0) if scale is None else scale
    q_lens = [1] * total if q_lens is None else [int(n) for n in q_lens]
    outs, row = [], 0
    for b, lq in enumerate(q_lens):
        k, v = ks[b].double(), vs[b].double()
        lk, hkv = k.shape[0], k.shape[1]
        qb = q[row: row + lq].double() * scale
        row += lq
        k, v = k.repeat_interleave(Hq // hkv, 1), v.repeat_interleave(Hq // hkv, 1)
        s = torch.einsum("qhd,nhd->hqn", qb, k)
        if soft_cap:
            s = soft_cap * torch.tanh(s / soft_cap)
        pos = torch.arange(lq)[:, None] + (lk - lq)
        j = torch.arange(lk)[None, :]
        allowed = torch.ones(lq, lk, dtype=torch.bool)
        if causal:
            allowed &= j <= pos
        if window:
            allowed &= j > pos - window
        s = s.masked_fill(~allowed, -math.inf)
        p = torch.softmax(s, -1).nan_to_num(0.0)   # rows without keys: 0
        outs.append(torch.einsum("hqn,nhd->qhd", p, v))
    return torch.cat(outs).to(out_dtype or q.dtype) if outs else q.new_zeros(q.shape, dtype=out_dtype or q.dtype)


def decode_attention_ref(q, ks, vs, *, scale=None, soft_cap=0.0, window=0, out_dtype=None):
    """fp64 reference of decode: ks[b], vs[b] are request b's keys/values [L_b, Hkv, D]."""
    return varlen_attention_ref(q, ks, vs, None, scale=scale, soft_cap=soft_cap, window=window, out_dtype=out_dtype)


# ---------------------------------------------------------------------------------------------
# op spec (prefill, extend and decode, paged and dense, share it: the same kernels)
# ---------------------------------------------------------------------------------------------
def _paged_inputs(s: dict, g):
    B, Hq, Hkv, D, L, page = s["batch"], s["heads"], s["kv_heads"], s["head_dim"], s["seq_k"], s.get("page_size", 16)
    lq = s.get("seq_q", 1)
    q = torch.randn(B * lq, Hq, D, generator=g)
    pages = cdiv(L, page)
    kc = torch.randn(B * pages, page, Hkv, D, generator=g)
    vc = torch.randn(B * pages, page, Hkv, D, generator=g)
    bt = torch.randperm(B * pages, generator=g).reshape(B, pages)
    return q, kc, vc, bt, torch.full((B,), L), torch.arange(B + 1) * lq


def _gather(kc, bt, lens):
    return [kc[bt[b]].reshape(-1, *kc.shape[2:])[: int(lens[b])] for b in range(bt.shape[0])]


def _problem(s: dict) -> Problem:
    q, kc, vc, bt, lens, cu_q = _paged_inputs(s, torch.Generator().manual_seed(0))
    q_lens = (cu_q[1:] - cu_q[:-1]).tolist()
    return Problem(run=lambda cfg: paged_attention(q, kc, vc, bt, lens, cu_q, config=cfg),
                   ref=lambda: varlen_attention_ref(q, _gather(kc, bt, lens), _gather(vc, bt, lens), q_lens,
                                                    out_dtype=torch.float64),
                   eager=None)


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    D = shape.get("head_dim", 64)
    q, kc = torch.zeros(3, 2, D, dtype=dt), torch.zeros(2, 16, 1, D, dtype=dt)
    for cap in (0.0, 30.0):
        paged_attention(q, kc, kc, torch.tensor([[0, 1]], dtype=torch.int32), torch.tensor([20], dtype=torch.int32),
                        torch.tensor([0, 3], dtype=torch.int32), soft_cap=cap, config=cfg)


def _clamp(cfg: dict, dims: dict) -> dict:
    """BLOCK_D is head_dim's power of two (not a choice); BLOCK_M no more than the rows a request
    has (queries x the GQA group, when given); head_dim chunks BLOCK_DK/BLOCK_DO at most BLOCK_D."""
    cfg = {**cfg, "BLOCK_D": max(16, npow2(dims["head_dim"]))}
    if dims.get("rows") is not None:
        cfg["BLOCK_M"] = min(cfg["BLOCK_M"], npow2(max(1, dims["rows"])))
    for key in ("BLOCK_DK", "BLOCK_DO"):
        cfg[key] = min(cfg.get(key, cfg["BLOCK_D"]), cfg["BLOCK_D"])
    return cfg


def _work(cfg: dict, s: dict) -> Work:
    L, D, lq = s["seq_k"], s["head_dim"], s.get("seq_q", 1)
    rows = lq * s["heads"] // s["kv_heads"]
    bm, bn = min(cfg["BLOCK_M"], npow2(rows)), cfg["BLOCK_N"]
    blocks = cdiv(L, bn)
    return Work(programs=s["batch"] * s["kv_heads"] * cdiv(rows, bm) * cdiv(L, KV_SPLIT),
                elements=bm * D + 2 * min(L, KV_SPLIT) * D + bm * D,
                segments=bm + 2 * min(L, KV_SPLIT) + bm,
                flops=4 * bm * min(blocks * bn, KV_SPLIT) * D)


SPEC = OpSpec(
    name="serving_attention",
    key_dims={"head_dim": "exact"},   # never the batch, the request count, the query count or the KV length
    space=tuple({"BLOCK_M": bm, "BLOCK_N": bn} for bm in (16, 32, 64) for bn in (16, 32, 64)),
    spaces={"scratchpad": tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_DK": dk, "BLOCK_DO": 32}
                                for bm in (1, 2, 4, 8, 16) for bn in (8, 16) for dk in (16, 32))},
    # scratchpad: the Kunlun cost model's cheapest candidate at both tune shapes (BLOCK_M follows
    # the rows a request has, so decode runs 4-row blocks of the GQA group)
    # cache: with narrow dots (bf16 on AMX tiles) larger blocks amortise the softmax between the
    # now cheap dots (2-core AMX host, bf16 against SDPA: varlen prefill 2 x 1024 tokens 32/8 x 128
    # causal 0.37x -> 0.56x, paged decode 8 requests over 4096 keys 1.15x -> 1.30x)
    defaults={"cache": lambda dims: {"BLOCK_M": 128, "BLOCK_N": 128} if dims.get("narrow") else
              {"BLOCK_M": 32, "BLOCK_N": 32},
              "scratchpad": {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_DK": 32, "BLOCK_DO": 32},
              "simt": {"BLOCK_M": 64, "BLOCK_N": 64}},
    clamp=_clamp,
    dims_of=lambda s: {"head_dim": s["head_dim"], "rows": s.get("seq_q", 1) * s["heads"] // s["kv_heads"]},
    problem=_problem,
    describe=lambda s: (f"{s['batch']} req x {s.get('seq_q', 1)} q x {s['heads']}/{s['kv_heads']} heads x "
                        f"{s['head_dim']}, kv {s['seq_k']}"),
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "decode", "batch": 8, "heads": 32, "kv_heads": 8, "head_dim": 128, "seq_k": 1024},
                 {"label": "prefill", "batch": 1, "seq_q": 256, "heads": 32, "kv_heads": 8, "head_dim": 128,
                  "seq_k": 256}),
    quick_shapes=({"label": "tiny", "batch": 2, "heads": 2, "kv_heads": 1, "head_dim": 32, "seq_k": 40,
                   "page_size": 8},),
    strict_fixed={"BLOCK_N": STRICT_BLOCK_N},
    bit_neutral=frozenset({"BLOCK_M", "BLOCK_DK", "BLOCK_DO"}),   # rows per program / head_dim chunks only
    dot_rows=frozenset({"BLOCK_M"}),   # the rows of q.k^T and p.v
    context_dims=frozenset({"narrow"}),   # narrow dots: the dtype and policy's, not the batch's
)
SPECS = (SPEC,)

__all__ = ["paged_attention", "varlen_attention", "paged_decode_attention", "decode_attention",
           "varlen_attention_ref", "decode_attention_ref", "serving_attention_kernel", "serving_combine_kernel",
           "KV_SPLIT", "STRICT_BLOCK_N", "SPEC", "SPECS"]
