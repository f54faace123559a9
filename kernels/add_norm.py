"""add_layer_norm: the residual add fused with layer_norm (next to add_rms_norm in kernels/norm.py).

s = round(x + residual) to the input dtype (returned, for the next residual), then
y = (s - mean) / sqrt(var + eps) * weight + bias over the last dim, with the same passes, chunks
and fixed order as layer_norm (so y equals layer_norm(s) bitwise when both run with the same BLOCK): mean,
then the sum of squared deviations, each accumulated in a BLOCK-wide fp32 tile and folded by one
tl.sum. s is recomputed in each pass rather than re-read from memory, and stored in the last; a
row of one chunk computes it once. BLOCK depends only on the
row length (and is STRICT_BLOCK = 64 on every target in the strict policy), so rows are batch-invariant.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem

from .checks import check_device, config_text
from .norm import (LAYER_NORM, _check_eps, _check_residual, _check_vec, _chunk_f32, _config, _layer_norm_tile,
                   _residual_sum, _rows, _vector_f32, _wrapper_checks, layer_norm_ref)
from .op_plans import MISS
from .torch_ops import define


@kernel
def add_layer_norm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, res_ptr, N, sx, sxn, sr, srn, sy, eps,
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK: tl.constexpr,
                          ONE_CHUNK: tl.constexpr = False, EVEN: tl.constexpr = False):
    """ONE_CHUNK (N <= BLOCK): s is computed once and kept, then normalised as layer_norm's one-chunk
    row (_layer_norm_tile: the operations of the passes below when they run one iteration, so the
    same bits). EVEN: N == BLOCK."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    r_row = r_ptr + row * sr
    dt = x_ptr.dtype.element_ty
    if ONE_CHUNK:
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        s = _residual_sum(x_row, sxn, r_row, srn, cols, mask, dt)
        tl.store(res_ptr + row * sy + cols, s, mask=mask)
        _layer_norm_tile(s.to(tl.float32), y_ptr + row * sy, N, eps, _vector_f32(w_ptr, cols, mask, HAS_W),
                         _vector_f32(b_ptr, cols, mask, HAS_B), cols, mask, HAS_W, HAS_B, EVEN, BLOCK)
        return
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += _residual_sum(x_row, sxn, r_row, srn, cols, cols < N, dt).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        s = _residual_sum(x_row, sxn, r_row, srn, cols, cols < N, dt).to(tl.float32)
        d = tl.where(cols < N, s - mean, 0.0)
        acc2 += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        s = _residual_sum(x_row, sxn, r_row, srn, cols, mask, dt)
        tl.store(res_ptr + row * sy + cols, s, mask=mask)   # stored in the last pass: fewer LM buffers
        y = (s.to(tl.float32) - mean) * rstd
        if HAS_W:
            y = y * _chunk_f32(w_ptr, 1, cols, mask)
        if HAS_B:
            y = y + _chunk_f32(b_ptr, 1, cols, mask)
        tl.store(y_ptr + row * sy + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None, eps: float = 1e-5, *, config: dict | None = None):
    """(layer_norm(x + residual), x + residual); the sum is rounded to x.dtype before it is normalised.
    Runs as the torch operator tilejit::add_layer_norm (forward only)."""
    config = config_text("add_layer_norm", SPEC, config)
    out = ADD_LAYER_NORM_OP.replayed(x, residual, weight, bias, eps, config)   # a seen signature: its checks passed
    if out is not MISS:
        return out
    if residual is None:
        raise TypeError("add_layer_norm: argument 'residual' must be a torch.Tensor, got None")
    eps = _wrapper_checks("add_layer_norm", eps, x=x, residual=residual, weight=weight, bias=bias)
    return ADD_LAYER_NORM_OP(x, residual, weight, bias, eps, config)


def _shapes(x, residual, weight, bias, eps, config):
    op = "add_layer_norm"
    _, _, N = _rows(op, "x", x)
    _check_residual(op, x, residual)
    _check_vec(op, "weight", weight, x, N), _check_vec(op, "bias", bias, x, N)
    _check_eps(op, eps)
    return ((x.shape, x.dtype),) * 2


def _launch(x, residual, weight, bias, eps, config, y, res):
    op = "add_layer_norm"
    x2, rows, N = _rows(op, "x", x)
    r2 = residual.reshape(rows, N)
    weight, bias = _check_vec(op, "weight", weight, x, N), _check_vec(op, "bias", bias, x, N)
    check_device(op, x=x, residual=residual, weight=weight, bias=bias, y=y, res=res)
    if rows and N:
        y2, s2 = y.view(rows, N), res.view(rows, N)
        cfg = _config(SPEC, config, N)
        add_layer_norm_kernel[(rows,)](x2, r2, weight, bias, y2, s2, N, x2.stride(0), x2.stride(1), r2.stride(0),
                                       r2.stride(1), y2.stride(0), eps, HAS_W=weight is not None,
                                       HAS_B=bias is not None, ONE_CHUNK=N <= cfg["BLOCK"], EVEN=N == cfg["BLOCK"],
                                       **cfg)


def add_layer_norm_ref(x, residual, weight=None, bias=None, eps=1e-5, out_dtype=None):
    s = (x.double() + residual.double()).to(x.dtype)
    return layer_norm_ref(s, weight, bias, eps, out_dtype), s


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(s["rows"], s["N"], generator=g), torch.randn(s["rows"], s["N"], generator=g)
    w, b = torch.randn(s["N"], generator=g), torch.randn(s["N"], generator=g)
    return Problem(run=lambda cfg: add_layer_norm(x, r, w, b, config=cfg)[0],
                   ref=lambda: add_layer_norm_ref(x, r, w, b, out_dtype=torch.float64)[0],
                   eager=lambda: torch.nn.functional.layer_norm(x + r, (s["N"],), w, b, 1e-5))


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    x, w = torch.zeros(2, 2 * cfg["BLOCK"] + 1, dtype=dt), torch.zeros(2 * cfg["BLOCK"] + 1, dtype=dt)
    add_layer_norm(x, x, w, w, config=cfg)


# strict: half of layer_norm's STRICT_BLOCK: the third input stream (the residual) needs two more
# LM tiles per pass than layer_norm, and 128-wide tiles would not fit Kunlun's LM
STRICT_BLOCK = 64

# layer_norm's space, defaults (but on cache targets) and clamp: the same passes over the row
SPEC = OpSpec(
    name="add_layer_norm", key_dims=LAYER_NORM.key_dims, space=LAYER_NORM.space, spaces=LAYER_NORM.spaces,
    # layer_norm's defaults: a row of one chunk computes s = x + r once (ONE_CHUNK), so a long
    # power-of-two row in one chunk is faster here too (bf16 [16, 4096] 34-48 -> 25 us, [256, 4096]
    # 552 -> 302-416 us, [64, 2048] 83-90 -> 63 us; fp32 the same or within noise; 2 Zen 4 cores)
    defaults=LAYER_NORM.defaults, clamp=LAYER_NORM.clamp, dims_of=LAYER_NORM.dims_of, problem=_problem,
    describe=LAYER_NORM.describe, probe=_probe, work=LAYER_NORM.work,
    tune_shapes=({"label": "decode", "rows": 16, "N": 4096},),
    quick_shapes=({"label": "tiny", "rows": 4, "N": 64},),
    strict_fixed={"BLOCK": STRICT_BLOCK},
)
SPECS = (SPEC,)

ADD_LAYER_NORM_OP = define(
    "add_layer_norm", "Tensor x, Tensor residual, Tensor? weight, Tensor? bias, float eps, str? config", ("y", "res"),
    shapes=_shapes, launch=_launch,
    reference=lambda x, r, w, b, eps, cfg: add_layer_norm_ref(x, r, w, b, eps, torch.float64))

__all__ = ["add_layer_norm", "add_layer_norm_ref", "add_layer_norm_kernel", "STRICT_BLOCK", "SPEC", "SPECS",
           "ADD_LAYER_NORM_OP"]
