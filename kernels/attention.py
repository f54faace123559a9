"""Flash-attention forward: out = softmax(q k^T * scale [+ causal mask]) v, optional logsumexp.

q: [B, Hq, Sq, D]; k, v: [B, Hkv, Sk, D] with Hkv dividing Hq (grouped-query attention: query
head h reads kv head h // (Hq // Hkv)). Any strides. fp32/fp16/bf16 inputs, fp32 arithmetic,
the output rounded once to the input dtype; the logsumexp (natural log, of the scaled scores) is
fp32 [B, Hq, Sq]. Head dims that are not a power of two are padded to one with masks.

Causal mask: query i attends key j iff j <= i + (Sk - Sq) (bottom-right aligned: the last query
sees every key, the KV-cache / flash-attn convention). For Sq == Sk this is exactly
torch.nn.functional.scaled_dot_product_attention(is_causal=True). For Sq != Sk torch's is_causal
is top-left aligned (j <= i) and differs; ours equals SDPA with
attn_mask=torch.ones(Sq, Sk).tril(Sk - Sq).bool(). Queries that see no key at all (only when
Sq > Sk) give an output of 0 and a logsumexp of -inf (SDPA gives NaN there). A NaN in q, k or a
score makes its rows NaN (out and lse), as in torch. head_dim 0 gives an empty output and, as
torch's logsumexp of all-zero scores, lse = log(number of keys the row sees).

Grouped-query decode: while Sq alone would leave a block part empty, the GROUP query heads that
read one kv head are packed into the rows of one block (PACK_GQA), so that kv head's K/V blocks
are read once for all of them instead of once per query head; rows are independent (below), so
packing changes no bit.

Numerics: one program owns BLOCK_M queries of one (batch, head) and walks the keys in ascending
BLOCK_N blocks (no split-KV) with an online softmax: running max m, running sum l and an fp32
accumulator rescaled by exp(m_old - m_new). Scores outside the mask are -inf (tl.where); a block
in which a row has seen only -inf so far is rescaled against 0, not -inf, so no NaN appears.
Blocks past the causal frontier of a program are skipped; that is exact (such a block multiplies
by exp(0) = 1 and adds 0). Each query row is computed independently of the other rows in its
block, and BLOCK_N depends only on the head dim and Sk, so a sequence's output does not depend
on the batch it is in, and decode (Sq = 1) reproduces the last row of a causal prefill bitwise.
"""
from __future__ import annotations

import math

import torch

from compiler import current_target, kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import OP_DTYPES, cdiv, check_device, check_same_dtype, check_tensor, config_text
from .configs import narrow_dots, select
from .torch_ops import decode_config, define

# strict: BLOCK_N fixes the softmax's summation order, so it is one value on every target, and the
# strict outputs of all targets are bitwise equal with their default configs (docs/numerics.md)
STRICT_BLOCK_N = 16


@kernel
def _mask_tile(mask_ptr, b, h, smb, smh, smm, smn, offs_m, offs_n, valid):
    """`valid` where the boolean (int8) mask says attend; broadcast mask dims have stride 0."""
    keep = tl.load(mask_ptr + b.to(tl.int64) * smb + h.to(tl.int64) * smh + offs_m[:, None] * smm
                   + offs_n[None, :] * smn, mask=valid, other=0)
    return valid & (keep != 0)


@kernel
def _mask_scores(s, mask_ptr, b, h, smb, smh, smm, smn, offs_m, offs_n, m_ok, n_ok, diag,
                 CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr):
    """Scores outside the rows, the keys, the causal frontier or the mask become -inf."""
    valid = n_ok[None, :] & m_ok[:, None]
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None] + diag)
    if HAS_MASK:
        valid = _mask_tile(mask_ptr, b, h, smb, smh, smm, smn, offs_m, offs_n, valid)
    return tl.where(valid, s, -float("inf"))


@kernel
def _query_rows(q_ptr, o_ptr, pid_m, pid_bh, Hq, GROUP, Sq, sqb, sqh, sqm, sob, soh, som,
                PACK_GQA: tl.constexpr, BLOCK_M: tl.constexpr):
    """A program's rows: (batch, kv head, each row's query position, the row mask, q and out row
    pointers, lse offsets). PACK_GQA: program_id(1) is a (batch, kv head) pair and the rows are
    the GROUP query heads times Sq queries that read that kv head."""
    if PACK_GQA:
        b = pid_bh // (Hq // GROUP)
        hk = pid_bh % (Hq // GROUP)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        h_rows = (hk * GROUP + rows // Sq).to(tl.int64)   # each row's query head
        offs_m = rows % Sq
        m_ok = rows < GROUP * Sq
        q_rows = q_ptr + b.to(tl.int64) * sqb + h_rows * sqh + offs_m * sqm
        o_rows = o_ptr + b.to(tl.int64) * sob + h_rows * soh + offs_m * som
        lse_offs = (b.to(tl.int64) * Hq + h_rows) * Sq + offs_m
    else:
        b = pid_bh // Hq
        h = pid_bh % Hq
        hk = h // GROUP
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < Sq
        q_rows = q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh + offs_m * sqm
        o_rows = o_ptr + b.to(tl.int64) * sob + h.to(tl.int64) * soh + offs_m * som
        lse_offs = pid_bh.to(tl.int64) * Sq + offs_m
    return b, hk, offs_m, m_ok, q_rows, o_rows, lse_offs


@kernel
def _dot_operand(x, NARROW_DOT: tl.constexpr):
    """A dot operand as loaded (NARROW_DOT), else widened to fp32: the products are exact either
    way, so only the dot's own accumulation differs."""
    if NARROW_DOT:
        return x
    return x.to(tl.float32)


@kernel
def _chunked_scores(q_rows, k_base, offs_n, n_ok, m_ok, D, sqd, skn, skd, NARROW_DOT: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DK: tl.constexpr):
    """q.k^T of one key block, head_dim taken BLOCK_DK at a time into one accumulator."""
    s = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, BLOCK_D, BLOCK_DK):
        offs_dk = d0 + tl.arange(0, BLOCK_DK)
        dk_ok = offs_dk < D
        q_c = _dot_operand(tl.load(q_rows[:, None] + offs_dk[None, :] * sqd,
                                   mask=m_ok[:, None] & dk_ok[None, :], other=0.0), NARROW_DOT)
        kt_c = _dot_operand(tl.load(k_base + offs_n[None, :] * skn + offs_dk[:, None] * skd,
                                    mask=dk_ok[:, None] & n_ok[None, :], other=0.0), NARROW_DOT)
        s = tl.dot(q_c, kt_c, s)
    return s


@kernel
def _unmasked_keys(Sk, diag, pid_m, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, PACK_GQA: tl.constexpr,
                   BLOCK_M: tl.constexpr):
    """The keys below which every row of the block sees every key (in bounds, before the causal
    frontier of its first row; none with a mask)."""
    unmasked = Sk
    if HAS_MASK:
        unmasked = 0
    elif CAUSAL:
        first_row = 0 if PACK_GQA else pid_m * BLOCK_M
        unmasked = tl.minimum(Sk, first_row + diag + 1)
    return unmasked


# NARROW_DOT (fp16/bf16 inputs, fast policy, a target with `Caps.narrow_dots`): q, k and v enter the
# dots in their own dtype, and p is rounded to v's dtype for the P.V dot. SKIP_WHOLE (simt targets):
# a key block that every row sees whole skips the mask (tl.where with an all-true mask is the
# identity, so no bit changes). Elsewhere the branch costs more than the mask: a second score tile
# in Kunlun's local memory, a materialised one on cpu (17.8-19.0 against 17.3 ms, causal fp32
# (1, 16, 1024, 64), 2 cores).
#
# q.k^T runs over head_dim in chunks of BLOCK_DK, chained into one accumulator (the same fma chain
# as a single dot over all of BLOCK_D), so neither BLOCK_DK nor BLOCK_DO changes a result bit: they
# let a target with little local memory (Kunlun LM) hold tiles of a long head_dim.
@kernel
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, mask_ptr,
                     Hq, GROUP, Sq, Sk, D, scale, smb, smh, smm, smn,
                     sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
                     CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr, HAS_MASK: tl.constexpr,
                     PACK_GQA: tl.constexpr, NARROW_DOT: tl.constexpr, SKIP_WHOLE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     BLOCK_DK: tl.constexpr, BLOCK_DO: tl.constexpr):
    """One program: BLOCK_M query rows x BLOCK_DO output columns (program_id(2) picks the columns);
    with PACK_GQA the rows are query heads that share one kv head (_query_rows). NARROW_DOT and
    SKIP_WHOLE: above."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    pid_d = tl.program_id(2)
    b, hk, offs_m, m_ok, q_rows, o_rows, lse_offs = _query_rows(
        q_ptr, o_ptr, pid_m, pid_bh, Hq, GROUP, Sq, sqb, sqh, sqm, sob, soh, som, PACK_GQA, BLOCK_M)
    k_base = k_ptr + b.to(tl.int64) * skb + hk.to(tl.int64) * skh
    v_base = v_ptr + b.to(tl.int64) * svb + hk.to(tl.int64) * svh

    offs_do = pid_d * BLOCK_DO + tl.arange(0, BLOCK_DO)
    offs_n0 = tl.arange(0, BLOCK_N)
    do_ok = offs_do < D
    if BLOCK_DK == BLOCK_D:   # q stays in registers/local memory for the whole key loop
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q = _dot_operand(tl.load(q_rows[:, None] + offs_d[None, :] * sqd,
                                 mask=m_ok[:, None] & d_ok[None, :], other=0.0), NARROW_DOT)

    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DO), dtype=tl.float32)
    # query row i sits at absolute key position i + (Sk - Sq)
    diag = Sk - Sq
    hi = Sk
    if CAUSAL and not PACK_GQA:   # packed rows of a block may sit anywhere in 0..Sq-1: all keys
        hi = tl.minimum(Sk, (pid_m + 1) * BLOCK_M + diag)
    unmasked = _unmasked_keys(Sk, diag, pid_m, CAUSAL, HAS_MASK, PACK_GQA, BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        n_ok = offs_n < Sk
        if BLOCK_DK == BLOCK_D:
            kt = _dot_operand(tl.load(k_base + offs_n[None, :] * skn + offs_d[:, None] * skd,
                                      mask=d_ok[:, None] & n_ok[None, :], other=0.0), NARROW_DOT)
            s = tl.dot(q, kt)
        else:
            s = _chunked_scores(q_rows, k_base, offs_n, n_ok, m_ok, D, sqd, skn, skd, NARROW_DOT,
                                BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DK)
        s = s * scale
        if SKIP_WHOLE:
            if start_n + BLOCK_N > unmasked:
                s = _mask_scores(s, mask_ptr, b, pid_bh % Hq, smb, smh, smm, smn, offs_m, offs_n, m_ok, n_ok,
                                 diag, CAUSAL, HAS_MASK)
        else:
            s = _mask_scores(s, mask_ptr, b, pid_bh % Hq, smb, smh, smm, smn, offs_m, offs_n, m_ok, n_ok, diag,
                             CAUSAL, HAS_MASK)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # a row that has seen no key yet keeps m = -inf; rescale it against 0 to avoid inf - inf
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp(s - m_ref[:, None])
        alpha = tl.exp(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + offs_n[:, None] * svn + offs_do[None, :] * svd,
                    mask=n_ok[:, None] & do_ok[None, :], other=0.0)
        if NARROW_DOT:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        else:
            acc = tl.dot(p, v.to(tl.float32), acc * alpha[:, None])
        m_i = m_new
    has_keys = l_i != 0.0   # 0 only for a row that saw no key; NaN (propagated, as in torch) for a NaN score
    l_safe = tl.where(has_keys, l_i, 1.0)
    out = tl.where(has_keys[:, None], acc / l_safe[:, None], 0.0)
    tl.store(o_rows[:, None] + offs_do[None, :] * sod, out.to(o_ptr.dtype.element_ty),
             mask=m_ok[:, None] & do_ok[None, :])
    if STORE_LSE:
        lse = tl.where(has_keys, m_i + tl.log(l_safe), -float("inf"))
        first_d = (offs_m * 0 + pid_d) == 0   # one program of the row's column blocks stores it
        tl.store(lse_ptr + lse_offs, lse, mask=m_ok & first_d)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
              return_lse: bool = False, *, mask: torch.Tensor | None = None, config: dict | None = None):
    """Scaled dot-product attention over [batch, heads, seq, head_dim] tensors.

    Returns out (q's dtype, q's shape), or (out, lse) with lse fp32 [batch, q_heads, seq_q] when
    return_lse. scale defaults to 1/sqrt(head_dim). `mask`: an optional bool tensor broadcastable
    to [batch, q_heads, seq_q, seq_k], True where a query may attend a key (combined with `causal`);
    a query row that may attend no key gives 0 (lse -inf). Runs as the torch operator
    tilejit::attention (differentiable: kernels/attention_backward.py).
    """
    op = "attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(op, name, t, dims=4)
    if mask is not None:
        check_tensor(op, "mask", mask, dtypes=(torch.bool,))
    if not isinstance(causal, bool):
        raise TypeError(f"{op}: argument 'causal' must be a bool, got {type(causal).__name__}")
    D = q.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(D) if D else 1.0
    elif not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale):
        raise ValueError(f"{op}: argument 'scale' must be a finite number, got {scale!r}")
    # the backward needs the logsumexp: computed whenever autograd will ask for a gradient
    want_lse = return_lse or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
    out, lse = TORCH_OP(q, k, v, mask, causal, float(scale), want_lse,
                           config_text(op, SPEC, config))
    return (out, lse) if return_lse else out


def _shapes(q, k, v, mask, causal, scale, return_lse, config):
    op = "attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(op, name, t, dims=4, dtypes=OP_DTYPES)
    check_same_dtype(op, "q", q, k=k, v=v)
    B, Hq, Sq, D = q.shape
    Bk, Hkv, Sk, Dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"{op}: k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if Bk != B:
        raise ValueError(f"{op}: batch sizes differ: q has {B}, k/v have {Bk}")
    if Dk != D:
        raise ValueError(f"{op}: head dims differ: q has {D}, k/v have {Dk}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"{op}: the number of kv heads ({Hkv}) must divide the number of q heads ({Hq})")
    if mask is not None:
        check_tensor(op, "mask", mask, dtypes=(torch.bool,))
        if mask.dim() > 4 or any(m not in (1, n) for m, n in zip(mask.shape[::-1], (Sk, Sq, Hq, B))):
            raise ValueError(f"{op}: mask of shape {tuple(mask.shape)} does not broadcast to "
                             f"[batch, q_heads, seq_q, seq_k] = {[B, Hq, Sq, Sk]}")
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    return (q.shape, q.dtype), ((B, Hq, Sq) if return_lse else (0,), lse_dtype)


def _launch(q, k, v, mask, causal, scale, return_lse, config, out, lse):
    op = "attention"
    check_device(op, q=q, k=k, v=v, mask=mask, out=out, lse=lse)
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    if not (B * Hq * Sq and D):
        if return_lse:
            lse.copy_(_empty_head_lse(B, Hq, Sq, Sk, causal, mask, lse))
        return
    # grouped-query heads are packed into the rows of one block while Sq alone leaves it part empty
    # (decode): the block's K/V is then read once per kv head instead of once per query head
    group, explicit, narrow = Hq // Hkv, decode_config(config), narrow_dots(q.dtype)
    full_m = (explicit or select(SPEC, None, head_dim=D, seq_k=Sk, narrow=narrow))["BLOCK_M"]
    pack = group > 1 and mask is None and npow2(Sq) < full_m
    rows = group * Sq if pack else Sq
    cfg = explicit or select(SPEC, None, head_dim=D, seq_k=Sk, seq_q=rows, narrow=narrow)
    cfg.setdefault("BLOCK_D", npow2(D))
    if cfg["BLOCK_D"] < D:
        raise ValueError(f"{op}: config BLOCK_D={cfg['BLOCK_D']} is smaller than head_dim {D}")
    for key in ("BLOCK_DK", "BLOCK_DO"):   # head_dim chunks: at most BLOCK_D, dividing it
        cfg[key] = min(cfg.get(key, cfg["BLOCK_D"]), cfg["BLOCK_D"])
        if cfg["BLOCK_D"] % cfg[key]:
            raise ValueError(f"{op}: config {key}={cfg[key]} must divide BLOCK_D={cfg['BLOCK_D']}")
    m8 = mask.expand(B, Hq, Sq, Sk).view(torch.int8) if mask is not None else None
    attention_kernel[(cdiv(rows, cfg["BLOCK_M"]), B * (Hkv if pack else Hq), cfg["BLOCK_D"] // cfg["BLOCK_DO"])](
        q, k, v, out, lse if return_lse else None, m8, Hq, group, Sq, Sk, D, float(scale),
        *(m8.stride() if m8 is not None else (0,) * 4), *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        CAUSAL=causal, STORE_LSE=return_lse, HAS_MASK=m8 is not None, PACK_GQA=pack,
        NARROW_DOT=narrow, SKIP_WHOLE=current_target().caps.tile_class == "simt", **cfg)


def _empty_head_lse(B: int, Hq: int, Sq: int, Sk: int, causal: bool, mask, lse) -> torch.Tensor:
    """lse of rows whose scores are all 0 (head_dim 0): log of the number of keys each row sees
    (-inf for none), as torch.logsumexp of those scores."""
    allowed = torch.ones(Sq, Sk, dtype=torch.bool, device=lse.device)
    if causal:
        allowed = allowed.tril(Sk - Sq)
    allowed = allowed.expand(B, Hq, Sq, Sk)
    if mask is not None:
        allowed = allowed & mask
    return torch.log(allowed.sum(-1).to(lse.dtype))


def _reference(q, k, v, mask, causal, scale, return_lse, config):
    out, lse = attention_ref(q, k, v, causal, scale, True, torch.float64, mask=mask, lse_dtype=torch.float64)
    return out, (lse if return_lse else lse.new_empty(0))


def attention_ref(q, k, v, causal=False, scale=None, return_lse=False, out_dtype=None, mask=None,
                  lse_dtype=torch.float32):
    """fp64 reference with the same (bottom-right) causal convention and bool `mask`; rows with no
    key give 0 / -inf."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    scale = (1.0 / math.sqrt(D) if D else 1.0) if scale is None else scale
    kd = k.double().repeat_interleave(Hq // Hkv, dim=1)
    vd = v.double().repeat_interleave(Hq // Hkv, dim=1)
    s = torch.matmul(q.double(), kd.transpose(-1, -2)) * scale
    if causal:
        allowed = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
        s = s.masked_fill(~allowed, -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = torch.matmul(p, vd).to(out_dtype or q.dtype)
    return (out, lse.to(lse_dtype)) if return_lse else out


# ---------------------------------------------------------------------------------------------
# the op spec
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    """BLOCK_N no longer than the keys, BLOCK_M no longer than the queries (when seq_q is given),
    BLOCK_D the head dim padded to a power of two, head_dim chunks BLOCK_DK/BLOCK_DO at most BLOCK_D."""
    cfg = dict(cfg)
    cfg["BLOCK_N"] = min(cfg["BLOCK_N"], max(16, npow2(dims["seq_k"])))
    if dims.get("seq_q") is not None:
        cfg["BLOCK_M"] = min(cfg["BLOCK_M"], npow2(max(1, dims["seq_q"])))
    cfg["BLOCK_D"] = npow2(dims["head_dim"])
    for key in ("BLOCK_DK", "BLOCK_DO"):
        cfg[key] = min(cfg.get(key, cfg["BLOCK_D"]), cfg["BLOCK_D"])
    return cfg


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    hkv = s.get("kv_heads", s["heads"])
    q = torch.randn(s["batch"], s["heads"], s["seq_q"], s["head_dim"], generator=g)
    k = torch.randn(s["batch"], hkv, s["seq_k"], s["head_dim"], generator=g)
    v = torch.randn(s["batch"], hkv, s["seq_k"], s["head_dim"], generator=g)
    causal = bool(s.get("causal", False))
    eager = None
    # torch's is_causal is top-left aligned; equal to tilejit's bottom-right only when seq_q == seq_k
    if not causal or s["seq_q"] == s["seq_k"]:
        def eager():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=hkv != s["heads"])
    return Problem(run=lambda cfg: attention(q, k, v, causal=causal, config=cfg),
                   ref=lambda: attention_ref(q, k, v, causal=causal, out_dtype=torch.float64), eager=eager)


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    d = int(shape.get("head_dim", 64))
    kv = torch.empty(1, 1, 2 * cfg["BLOCK_N"], d, dtype=dt)
    attention(torch.empty(1, 1, 2 * cfg["BLOCK_M"], d, dtype=dt), kv, kv, causal=bool(shape.get("causal", False)),
              config=cfg)


def _work(cfg: dict, s: dict) -> Work:
    bm, bn, d = cfg["BLOCK_M"], cfg["BLOCK_N"], s["head_dim"]
    bd = cfg.get("BLOCK_D", d)
    dk, do = min(cfg.get("BLOCK_DK", bd), bd), min(cfg.get("BLOCK_DO", bd), bd)
    blocks = cdiv(s["seq_k"], bn)
    q_reads = bm * bd * (1 if dk == bd else blocks)          # q is re-read per key block when chunked
    return Work(programs=s["batch"] * s["heads"] * cdiv(s["seq_q"], bm) * (bd // do),   # per output-column block
                elements=q_reads + blocks * (bn * bd + bn * do) + bm * do,
                # one per row segment: q rows per chunk, K^T columns (contiguous along d), V rows, out rows
                segments=(bm * (bd // dk)) * (1 if dk == bd else blocks) + blocks * (bn * (bd // dk) + bn) + bm,
                flops=blocks * (2 * bm * bn * bd + 2 * bm * bn * do),   # every column program recomputes q.k^T
                axis0=cdiv(s["seq_q"], bm))


def _describe(s: dict) -> str:
    kv = f"/{s['kv_heads']}" if s.get("kv_heads", s["heads"]) != s["heads"] else ""
    return (f"({s['batch']},{s['heads']}{kv},{s['seq_q']},{s['head_dim']}) kv{s['seq_k']}"
            + (" causal" if s.get("causal") else ""))


def _by_head_dim(small: dict, large: dict):
    """A default that depends on the padded head dim: `small` up to 64, `large` above."""
    return lambda dims: small if npow2(dims["head_dim"]) <= 64 else large


def _cache(dims: dict) -> dict:
    """A cache target's default. With narrow dots (bf16 on AMX tiles: Caps.narrow_dots) the dots
    are cheap beside the softmax between them, and larger blocks amortise it: on a 2-core AMX host,
    causal bf16 (1, 32, 512, 128) against SDPA 32 x 32 0.38x -> 128 x 128 0.73x, (1, 16, 1024, 64)
    32 x 64 0.45x -> 0.63x. Otherwise blocks of 32 rows, and of 64 keys where head_dim <= 64."""
    if dims.get("narrow"):
        return {"BLOCK_M": 128, "BLOCK_N": 128}
    return {"BLOCK_M": 32, "BLOCK_N": 64 if npow2(dims["head_dim"]) <= 64 else 32}


def _scratch(dims: dict) -> dict:
    """A scratchpad target's default: the Kunlun cost model's cheapest candidate of the space for
    prefill and for decode (one query row), the memory plan's re-reads and SM staging priced in
    (xpu2, fp32, head_dim 128). BLOCK_N, the one parameter that changes fast-policy bits, serves
    both, so it is their trade-off: 16 (prefill with 32 would be 12% cheaper, decode 67% dearer)."""
    return {"BLOCK_M": 4, "BLOCK_N": 16, "BLOCK_DK": 32, "BLOCK_DO": 64}


SPEC = OpSpec(
    name="attention",
    # head_dim exact (it fixes BLOCK_D); seq_k as a power of two: the KV length changes every decode
    # step and a power-of-two bucket bounds the number of decisions to log2(seq_k)
    key_dims={"head_dim": "exact", "seq_k": "pow2"},
    space=tuple({"BLOCK_M": bm, "BLOCK_N": bn} for bm in (16, 32, 64, 128) for bn in (16, 32, 64, 128)),
    spaces={"scratchpad": tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_DK": dk, "BLOCK_DO": do}
                                for bm in (1, 4, 8, 16) for bn in (8, 16, 32) for dk in (16, 32)
                                for do in (32, 64)),
            "simt": tuple({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
                          for bm, bn, w, st in ((64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3),
                                                (64, 64, 4, 2), (128, 32, 4, 3)))},
    defaults={"cache": _cache,
              "scratchpad": _scratch,
              "simt": _by_head_dim({"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
                                   {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3})},
    clamp=_clamp,
    dims_of=lambda s: {"head_dim": s["head_dim"], "seq_k": s["seq_k"], "seq_q": s["seq_q"]},
    problem=_problem,
    describe=_describe,
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "prefill", "batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 256, "seq_k": 256,
                  "head_dim": 128, "causal": True},
                 {"label": "decode", "batch": 4, "heads": 32, "kv_heads": 8, "seq_q": 1, "seq_k": 1024,
                  "head_dim": 128, "causal": False},
                 {"label": "small", "batch": 1, "heads": 4, "seq_q": 64, "seq_k": 64, "head_dim": 64,
                  "causal": True}),
    quick_shapes=({"label": "tiny", "batch": 1, "heads": 2, "seq_q": 16, "seq_k": 32, "head_dim": 32,
                   "causal": False},),
    strict_fixed={"BLOCK_N": STRICT_BLOCK_N},
    bit_neutral=frozenset({"BLOCK_M", "BLOCK_DK", "BLOCK_DO"}),   # they group rows / split head_dim only
    dot_rows=frozenset({"BLOCK_M"}),   # the rows of q.k^T and p.v
    context_dims=frozenset({"narrow"}),   # narrow dots: the dtype and policy's, not the batch's
)
SPECS = (SPEC,)

# the torch operators tilejit::attention / tilejit::attention_out (kernels/torch_ops.py); lse is
# empty (shape (0,)) unless return_lse
TORCH_OP = define("attention", "Tensor q, Tensor k, Tensor v, Tensor? mask, bool causal, float scale, bool return_lse, "
                  "str? config", ("out", "lse"), shapes=_shapes, launch=_launch, reference=_reference)

__all__ = ["attention", "attention_ref", "attention_kernel", "STRICT_BLOCK_N", "SPEC", "SPECS", "TORCH_OP"]
