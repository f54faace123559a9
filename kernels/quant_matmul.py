"""Weight-only int8 matmul: C = A @ (W * scale), A [M, K] fp32/fp16/bf16, W [K, N] int8, scale
fp32 per output channel ([N]) or per group of `group_size` rows of K ([K / group_size, N]).

Each W tile is dequantised in fp32 (w * scale, one rounding per element) and fed, with A widened
to fp32, to a `dot` that chains fused multiply-adds in ascending k across the whole K loop (as
kernels/matmul.py does), so BLOCK_K does not change a bit and a row of C does not depend on the
other rows (BLOCK_M only groups rows). The output is rounded once to `out_dtype` (A's dtype by
default, or fp32: bf16 activations with an fp32 output).
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import FLOAT_DTYPES, cdiv, check_device, check_tensor
from .configs import select
from .outputs import new_output


@kernel
def w8_matmul_kernel(a_ptr, w_ptr, s_ptr, c_ptr, M, N, K, GROUP, sam, sak, swk, swn, ssg, scm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        wm = k_ok[:, None] & n_ok[None, :]
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * sam + ks[None, :] * sak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        w = tl.load(w_ptr + ks[:, None].to(tl.int64) * swk + rn[None, :] * swn, mask=wm, other=0).to(tl.float32)
        s = tl.load(s_ptr + (ks[:, None] // GROUP).to(tl.int64) * ssg + rn[None, :], mask=wm, other=0.0)
        acc = tl.dot(a, w * s, acc)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * scm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def w8_matmul(a: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, group_size: int | None = None,
              out_dtype=None, config: dict | None = None) -> torch.Tensor:
    """a @ (w * scale): per-channel scale [N] (group_size None) or per-group [K // group_size, N]."""
    op = "w8_matmul"
    check_tensor(op, "a", a, dims=2)
    check_tensor(op, "w", w, dims=2, dtypes=(torch.int8,))
    check_tensor(op, "scale", scale, dims=(1, 2), dtypes=(torch.float32,))
    M, K = a.shape
    if w.shape[0] != K:
        raise ValueError(f"{op}: w has shape {tuple(w.shape)}; expected [K={K}, N] (a is [{M}, {K}])")
    N = w.shape[1]
    if group_size is None:
        if tuple(scale.shape) != (N,):
            raise ValueError(f"{op}: a per-channel scale must have shape [{N}], got {tuple(scale.shape)} "
                             f"(pass group_size= for per-group scales)")
        group = max(K, 1)
    else:
        if not isinstance(group_size, int) or group_size <= 0 or K % group_size:
            raise ValueError(f"{op}: group_size must be a positive int dividing K={K}, got {group_size!r}")
        if tuple(scale.shape) != (K // group_size, N):
            raise ValueError(f"{op}: per-group scales must have shape [{K // group_size}, {N}], got {tuple(scale.shape)}")
        group = group_size
    if out_dtype not in (None, torch.float32, a.dtype) or (out_dtype is not None and out_dtype not in FLOAT_DTYPES):
        raise TypeError(f"{op}: out_dtype must be None (a's dtype) or torch.float32, got {out_dtype}")
    check_device(op, a=a, w=w, scale=scale)
    s2 = scale.reshape(-1, N).contiguous()
    c = new_output((M, N), dtype=out_dtype or a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    cfg = dict(config) if config else select(SPEC, None, N=N, K=K, M=M)
    w8_matmul_kernel[(cdiv(M, cfg["BLOCK_M"]), cdiv(N, cfg["BLOCK_N"]))](
        a, w, s2, c, M, N, K, group, a.stride(0), a.stride(1), w.stride(0), w.stride(1), s2.stride(0), c.stride(0),
        **cfg)
    return c


def w8_matmul_ref(a, w, scale, group_size=None, out_dtype=None):
    s = scale.double().reshape(-1, w.shape[1])
    if group_size is not None:
        s = s.repeat_interleave(group_size, 0)
    return (a.double() @ (w.double() * s)).to(out_dtype or a.dtype)


def quantize_int8(w: torch.Tensor, group_size: int | None = None):
    """(int8 W, fp32 scale) with a symmetric scale max|w| / 127 per channel or per group of K rows."""
    K, N = w.shape
    g = w.float().reshape(K // (group_size or K), group_size or K, N)
    s = (g.abs().amax(1) / 127.0).clamp_min(1e-12)
    q = torch.round(g / s[:, None, :]).clamp(-127, 127).to(torch.int8).reshape(K, N)
    return q, (s[0] if group_size is None else s)


def _clamp(cfg: dict, dims: dict) -> dict:
    return {**cfg, "BLOCK_N": min(cfg["BLOCK_N"], max(16, npow2(dims["N"]))),
            "BLOCK_K": min(cfg["BLOCK_K"], max(16, npow2(dims["K"])))}


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(s["M"], s["K"], generator=g)
    w, sc = quantize_int8(torch.randn(s["K"], s["N"], generator=g) * s["K"] ** -0.5, s.get("group"))
    scales = sc if s.get("group") is None else sc.repeat_interleave(s["group"], 0)
    return Problem(run=lambda cfg: w8_matmul(a, w, sc, group_size=s.get("group"), config=cfg),
                   ref=lambda: w8_matmul_ref(a, w, sc, s.get("group"), out_dtype=torch.float64),
                   eager=lambda: a @ (w.float() * scales))   # dequantise, then matmul, as an eager user would


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    K, N = 2 * cfg["BLOCK_K"], 2 * cfg["BLOCK_N"]
    w8_matmul(torch.zeros(2 * cfg["BLOCK_M"], K, dtype=dt), torch.zeros(K, N, dtype=torch.int8),
              torch.ones(N), config=cfg)


SPEC = OpSpec(
    name="w8_matmul",
    key_dims={"N": "align32", "K": "align32"},
    space=tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
                for bm in (16, 32, 64) for bn in (32, 64, 128) for bk in (32, 64, 128)),
    spaces={"scratchpad": tuple({"BLOCK_M": bm, "BLOCK_N": 16, "BLOCK_K": 16} for bm in (4, 8, 16))},
    defaults={"cache": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64},
              "scratchpad": {"BLOCK_M": 8, "BLOCK_N": 16, "BLOCK_K": 16},
              "simt": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}},
    clamp=_clamp,
    dims_of=lambda s: {"N": s["N"], "K": s["K"], "M": s["M"]},
    problem=_problem,
    describe=lambda s: f"{s['M']}x{s['N']}x{s['K']}" + (f" g{s['group']}" if s.get("group") else ""),
    probe=_probe,
    work=lambda cfg, s: Work(programs=cdiv(s["M"], cfg["BLOCK_M"]) * cdiv(s["N"], cfg["BLOCK_N"]),
                             elements=cdiv(s["K"], cfg["BLOCK_K"]) * cfg["BLOCK_K"] * (cfg["BLOCK_M"] + 2 * cfg["BLOCK_N"]),
                             segments=cdiv(s["K"], cfg["BLOCK_K"]) * (cfg["BLOCK_M"] + 2 * cfg["BLOCK_K"]),
                             flops=2 * cfg["BLOCK_M"] * cfg["BLOCK_N"] * s["K"]),
    tune_shapes=({"label": "decode o-proj int8", "M": 16, "N": 4096, "K": 4096, "group": 128},),
    quick_shapes=({"label": "tiny", "M": 16, "N": 64, "K": 64},),
    bit_neutral=frozenset({"BLOCK_M", "BLOCK_K"}),   # rows are grouped; k runs as one ascending fma chain
    # a decode batch (M of 1 to 16) runs row blocks of its size where the target declares BLOCK_M
    # bit-neutral: a 64-row block did 4x the dot's work at M = 16, on rows of zeros
    follows={"BLOCK_M": "M"},
    dot_rows=frozenset({"BLOCK_M"}),
)
SPECS = (SPEC,)

__all__ = ["w8_matmul", "w8_matmul_ref", "quantize_int8", "w8_matmul_kernel", "SPEC", "SPECS"]
