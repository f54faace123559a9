"""Rotary position embedding (rope) applied to q and k in one launch.

q: [tokens, Hq, D], k: [tokens, Hk, D] (k optional), the last dim contiguous. positions: [tokens]
(int32/int64) rows of the cos/sin tables, each [max_pos, rotary_dim // 2] (fp32 or q's dtype;
`rope_cos_sin` builds them). The first `rotary_dim` (even, <= D) dims of each head rotate, the
rest pass through. Layouts: NeoX (rotate-half: pairs (j, j + rotary_dim/2)) or GPT-J (interleaved:
pairs (2j, 2j+1)). For a pair (x1, x2) and angle (c, s):

    y1 = x1 * c - x2 * s,   y2 = x2 * c + x1 * s

in fp32 (no fused multiply-add in either policy's C targets; products rounded, then the
difference), rounded once to q's dtype. In place (inplace=True: q and k are written) or out of
place (new tensors, the pass-through dims copied). The table, not an in-kernel sin/cos, gives the
angles, so strict bits agree on every target. One program per token; it walks the heads of q and
then of k in BLOCK_H chunks, so a token's result does not depend on the other tokens.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import FLOAT_DTYPES, check_device, check_tensor
from .configs import select
from .indices import check_range, index_tensor
from .outputs import new_output_like


@kernel
def _rotate_heads(x_ptr, sxt, sxh, y_ptr, syt, syh, t, H, c, s, HALF, ROT, D,
                  IS_NEOX: tl.constexpr, COPY: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
                  BLOCK_P: tl.constexpr):
    """Rotate the first ROT dims of the H heads of token t (c, s: [BLOCK_R] fp32)."""
    j = tl.arange(0, BLOCK_R)
    if IS_NEOX:
        i1 = j
        i2 = j + HALF
    else:
        i1 = 2 * j
        i2 = 2 * j + 1
    for h0 in range(0, H, BLOCK_H):
        hs = h0 + tl.arange(0, BLOCK_H)
        m = (hs[:, None] < H) & (j[None, :] < HALF)
        xb = x_ptr + t * sxt + hs[:, None].to(tl.int64) * sxh
        yb = y_ptr + t * syt + hs[:, None].to(tl.int64) * syh
        x1 = tl.load(xb + i1[None, :], mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(xb + i2[None, :], mask=m, other=0.0).to(tl.float32)
        y1 = x1 * c[None, :] - x2 * s[None, :]
        y2 = x2 * c[None, :] + x1 * s[None, :]
        tl.store(yb + i1[None, :], y1.to(y_ptr.dtype.element_ty), mask=m)
        tl.store(yb + i2[None, :], y2.to(y_ptr.dtype.element_ty), mask=m)
        if COPY:
            for d0 in range(ROT, D, BLOCK_P):
                cols = d0 + tl.arange(0, BLOCK_P)
                mp = (hs[:, None] < H) & (cols[None, :] < D)
                tl.store(yb + cols[None, :], tl.load(xb + cols[None, :], mask=mp), mask=mp)


@kernel
def rope_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, pos_ptr, cos_ptr, sin_ptr, Hq, Hk, HALF, ROT, D,
                sqt, sqh, skt, skh, sqot, sqoh, skot, skoh, scos, ssin,
                HAS_K: tl.constexpr, IS_NEOX: tl.constexpr, COPY: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t)
    j = tl.arange(0, BLOCK_R)
    c = tl.load(cos_ptr + pos * scos + j, mask=j < HALF, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * ssin + j, mask=j < HALF, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, sqt, sqh, qo_ptr, sqot, sqoh, t, Hq, c, s, HALF, ROT, D, IS_NEOX, COPY,
                  BLOCK_H, BLOCK_R, BLOCK_P)
    if HAS_K:
        _rotate_heads(k_ptr, skt, skh, ko_ptr, skot, skoh, t, Hk, c, s, HALF, ROT, D, IS_NEOX, COPY,
                      BLOCK_H, BLOCK_R, BLOCK_P)


def rope_cos_sin(max_pos: int, rotary_dim: int, base: float = 10000.0, dtype=torch.float32, device="cpu"):
    """The (cos, sin) tables [max_pos, rotary_dim // 2] of the usual inverse-frequency schedule
    theta_j = base ** (-2j / rotary_dim), computed in fp64 on the host, then rounded to `dtype`."""
    inv = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype).to(device), torch.sin(ang).to(dtype).to(device)


def _check_heads(op, name, t, q):
    check_tensor(op, name, t, dims=3)
    if t.dtype != q.dtype:
        raise TypeError(f"{op}: argument '{name}' has dtype {t.dtype} but 'q' has {q.dtype}; they must match")
    if t.shape[0] != q.shape[0] or t.shape[2] != q.shape[2]:
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected [{q.shape[0]}, heads, {q.shape[2]}] "
                         f"(q's tokens and head_dim)")
    if t.stride(2) != 1:
        raise ValueError(f"{op}: argument '{name}' must have a contiguous last dim (stride 1), got {t.stride(2)}")


def _check_table(op, name, t, half, q):
    check_tensor(op, name, t, dims=2)
    if t.dtype not in (torch.float32, q.dtype):
        raise TypeError(f"{op}: argument '{name}' has dtype {t.dtype}; use float32 or q's dtype {q.dtype}")
    if t.shape[1] != half or t.stride(1) != 1:
        raise ValueError(f"{op}: {name} must be [max_pos, rotary_dim // 2 = {half}] with a contiguous last dim, "
                         f"got shape {tuple(t.shape)}")


def rope(q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
         *, rotary_dim: int | None = None, neox: bool = True, inplace: bool = False, config: dict | None = None):
    """(q_rot, k_rot) (k_rot None without k): q and k rotated by the angles of their tokens' positions."""
    op = "rope"
    check_tensor(op, "q", q, dims=3, dtypes=FLOAT_DTYPES)
    _check_heads(op, "q", q, q)
    if k is not None:
        _check_heads(op, "k", k, q)
    D = q.shape[2]
    rot = D if rotary_dim is None else rotary_dim
    if not isinstance(rot, int) or isinstance(rot, bool) or rot <= 0 or rot % 2 or rot > D:
        raise ValueError(f"{op}: rotary_dim must be an even int in [2, head_dim={D}], got {rotary_dim!r}")
    _check_table(op, "cos", cos, rot // 2, q)
    _check_table(op, "sin", sin, rot // 2, q)
    pos = index_tensor(op, "positions", positions, dims=1)
    if pos.shape[0] != q.shape[0]:
        raise ValueError(f"{op}: positions has {pos.shape[0]} entries, expected one per token ({q.shape[0]})")
    check_range(op, "positions", pos, 0, min(cos.shape[0], sin.shape[0]))
    check_device(op, q=q, k=k, cos=cos, sin=sin, positions=pos)
    qo = q if inplace else new_output_like(q)
    ko = None if k is None else (k if inplace else new_output_like(k))
    if q.shape[0] == 0:
        return qo, ko
    dims = {"head_dim": D, "rotary_dim": rot}
    cfg = _clamp(dict(config), dims) if config else select(SPEC, None, **dims)   # BLOCK_R follows rotary_dim
    kk, kko = (k, ko) if k is not None else (q, qo)
    rope_kernel[(q.shape[0],)](
        q, kk, qo, kko, pos, cos, sin, q.shape[1], kk.shape[1], rot // 2, rot, D,
        q.stride(0), q.stride(1), kk.stride(0), kk.stride(1), qo.stride(0), qo.stride(1), kko.stride(0), kko.stride(1),
        cos.stride(0), sin.stride(0), HAS_K=k is not None, IS_NEOX=bool(neox), COPY=(not inplace) and rot < D, **cfg)
    return qo, ko


def rope_ref(q, k, cos, sin, positions, *, rotary_dim=None, neox=True, out_dtype=None):
    """fp64 reference, one rounding to q's dtype (or out_dtype)."""
    def one(x):
        if x is None:
            return None
        rot = x.shape[-1] if rotary_dim is None else rotary_dim
        xd = x.double()
        c = cos.double()[positions.long()][:, None, :]
        s = sin.double()[positions.long()][:, None, :]
        r = xd[..., :rot]
        x1, x2 = (r[..., :rot // 2], r[..., rot // 2:]) if neox else (r[..., 0::2], r[..., 1::2])
        y1, y2 = x1 * c - x2 * s, x2 * c + x1 * s
        y = torch.cat([y1, y2], -1) if neox else torch.stack([y1, y2], -1).flatten(-2)
        return torch.cat([y, xd[..., rot:]], -1).to(out_dtype or x.dtype)
    return one(q), one(k)


# ---------------------------------------------------------------------------------------------
# op spec
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    """BLOCK_R is the rotary half-width's power of two (not a choice); BLOCK_P no wider than the pass-through."""
    half = max(1, dims["rotary_dim"] // 2)
    pas = dims["head_dim"] - dims["rotary_dim"]
    return {**cfg, "BLOCK_R": npow2(half), "BLOCK_P": min(cfg.get("BLOCK_P", 64), max(16, npow2(max(pas, 1))))}


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(s["tokens"], s["heads"], s["head_dim"], generator=g)
    k = torch.randn(s["tokens"], s["kv_heads"], s["head_dim"], generator=g)
    pos = torch.randint(0, 4096, (s["tokens"],), generator=g)
    cos, sin = rope_cos_sin(4096, s["rotary_dim"])
    rot = s["rotary_dim"]
    return Problem(run=lambda cfg: torch.cat([t.flatten() for t in rope(q, k, cos, sin, pos, rotary_dim=rot,
                                                                         config=cfg)]),
                   ref=lambda: torch.cat([t.flatten() for t in rope_ref(q, k, cos, sin, pos, rotary_dim=rot,
                                                                         out_dtype=torch.float64)]),
                   eager=lambda: rope_ref(q, k, cos.double(), sin.double(), pos, rotary_dim=rot))


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    D, rot = shape.get("head_dim", 64), shape.get("rotary_dim", 64)
    q = torch.zeros(2, 2 * cfg["BLOCK_H"] + 1, D, dtype=dt)
    cos, sin = rope_cos_sin(4, rot)
    rope(q, q, cos, sin, torch.zeros(2, dtype=torch.int32), rotary_dim=rot, config=cfg)


def _work(cfg: dict, s: dict) -> Work:
    heads = s["heads"] + s["kv_heads"]
    el = 2 * heads * s["head_dim"] + s["rotary_dim"]
    return Work(programs=s["tokens"], elements=el, segments=4 * heads + 2, flops=6 * heads * s["rotary_dim"] // 2)


SPEC = OpSpec(
    name="rope",
    key_dims={"head_dim": "exact", "rotary_dim": "exact"},
    space=tuple({"BLOCK_H": h, "BLOCK_P": 64} for h in (1, 2, 4, 8, 16)),
    spaces={"scratchpad": tuple({"BLOCK_H": h, "BLOCK_P": 32} for h in (1, 2, 4))},
    defaults={"cache": {"BLOCK_H": 8, "BLOCK_P": 64},
              "scratchpad": {"BLOCK_H": 2, "BLOCK_P": 32},
              "simt": {"BLOCK_H": 16, "BLOCK_P": 64}},
    clamp=_clamp,
    dims_of=lambda s: {"head_dim": s["head_dim"], "rotary_dim": s["rotary_dim"]},
    problem=_problem,
    describe=lambda s: f"{s['tokens']} tok, {s['heads']}+{s['kv_heads']} heads x {s['head_dim']} (rot {s['rotary_dim']})",
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "prefill", "tokens": 256, "heads": 32, "kv_heads": 8, "head_dim": 128, "rotary_dim": 128},),
    quick_shapes=({"label": "tiny", "tokens": 4, "heads": 2, "kv_heads": 1, "head_dim": 32, "rotary_dim": 32},),
    bit_neutral=frozenset({"BLOCK_H", "BLOCK_P"}),   # elementwise: grouping heads or columns changes no bit
)
SPECS = (SPEC,)

__all__ = ["rope", "rope_ref", "rope_cos_sin", "rope_kernel", "SPEC", "SPECS"]
