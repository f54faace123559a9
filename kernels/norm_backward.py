"""Backward of the row norms (rms_norm, add_rms_norm, layer_norm): the autograd formulas of the
torch operators tilejit::rms_norm / add_rms_norm / layer_norm, as tile programs.

Per row (s the normalised input: x, or the rounded sum x + residual that add_rms_norm returns),
with g = dy * w:

- rms_norm:   rstd = 1/sqrt(mean(s^2) + eps);  dx = (g - s * rstd^2 * mean(g s)) * rstd
- layer_norm: xhat = (x - mean) * rstd;        dx = (g - mean(g) - xhat * mean(g xhat)) * rstd
- add_rms_norm: dx = dresidual = the rms_norm dx of s plus the gradient of the returned sum.

One program per row walks the row in ascending BLOCK-wide chunks as the forward does (the
statistics are recomputed, not saved), and stores the row's rstd (and mean) for the weight gradient.
The weight and bias gradients are sums over rows: `norm_weight_grad_kernel` gives each program a
BLOCK_C-wide column block and walks every row in ascending BLOCK_R-row chunks into a
[BLOCK_R, BLOCK_C] fp32 tile folded once at the end, so each sum has one fixed order (no atomics).

Configs depend on the row length only (`key_dims`); in the strict policy BLOCK and BLOCK_R (the
two summation orders) are fixed on every target; BLOCK_C only groups columns into programs.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import OP_DTYPES, cdiv, check_device, check_same_dtype, check_tensor
from .configs import select
from .norm import _chunk_f32
from .torch_ops import decode_config, define, encode_config, set_backward

# strict: the two summation orders, one value on every target (the largest that fit Kunlun's LM:
# the backward holds about twice the forward's row chunks, so half the forward's STRICT_BLOCK)
STRICT_BLOCK = 64
STRICT_BLOCK_R = 4


@kernel
def _grad_in(dy_row, w_ptr, cols, mask, HAS_W: tl.constexpr):
    """g = dy * w over one chunk, in fp32."""
    g = _chunk_f32(dy_row, 1, cols, mask)
    if HAS_W:
        g = g * _chunk_f32(w_ptr, 1, cols, mask)
    return g


@kernel
def rms_norm_bwd_kernel(s_ptr, w_ptr, dy_ptr, dres_ptr, dx_ptr, rstd_ptr, N, stride_s, stride_sn, stride_dy,
                        stride_dres, stride_dx, eps, HAS_W: tl.constexpr, HAS_DRES: tl.constexpr,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s_row = s_ptr + row * stride_s
    dy_row = dy_ptr + row * stride_dy
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    acc_gs = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        s = _chunk_f32(s_row, stride_sn, cols, mask)
        acc += s * s
        acc_gs += _grad_in(dy_row, w_ptr, cols, mask, HAS_W) * s
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    c = tl.sum(acc_gs, axis=0) / N * rstd * rstd
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        s = _chunk_f32(s_row, stride_sn, cols, mask)
        dx = (_grad_in(dy_row, w_ptr, cols, mask, HAS_W) - s * c) * rstd
        if HAS_DRES:
            dx = dx + _chunk_f32(dres_ptr + row * stride_dres, 1, cols, mask)
        tl.store(dx_ptr + row * stride_dx + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@kernel
def layer_norm_bwd_kernel(x_ptr, w_ptr, dy_ptr, dx_ptr, mean_ptr, rstd_ptr, N, stride_x, stride_xn, stride_dy,
                          stride_dx, eps, HAS_W: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    dy_row = dy_ptr + row * stride_dy
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += _chunk_f32(x_row, stride_xn, cols, cols < N)
    mean = tl.sum(acc, axis=0) / N
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        d = tl.where(cols < N, _chunk_f32(x_row, stride_xn, cols, cols < N) - mean, 0.0)
        acc2 += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps)
    acc_g = tl.zeros([BLOCK], dtype=tl.float32)
    acc_gx = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        g = _grad_in(dy_row, w_ptr, cols, mask, HAS_W)
        xhat = tl.where(mask, (_chunk_f32(x_row, stride_xn, cols, mask) - mean) * rstd, 0.0)
        acc_g += g
        acc_gx += g * xhat
    mg = tl.sum(acc_g, axis=0) / N
    mgx = tl.sum(acc_gx, axis=0) / N
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        xhat = (_chunk_f32(x_row, stride_xn, cols, mask) - mean) * rstd
        dx = (_grad_in(dy_row, w_ptr, cols, mask, HAS_W) - mg - xhat * mgx) * rstd
        tl.store(dx_ptr + row * stride_dx + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@kernel
def norm_weight_grad_kernel(x_ptr, dy_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, ROWS, N, stride_x, stride_xn,
                            stride_dy, HAS_MEAN: tl.constexpr, HAS_DW: tl.constexpr, HAS_DB: tl.constexpr,
                            BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """dw[c] = sum_r dy[r, c] * xhat[r, c], db[c] = sum_r dy[r, c]: rows in ascending BLOCK_R chunks."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cols < N
    acc_w = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
    for r0 in range(0, ROWS, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        r_ok = rows < ROWS
        ok = r_ok[:, None] & c_ok[None, :]
        rows64 = rows.to(tl.int64)
        dy = tl.load(dy_ptr + rows64[:, None] * stride_dy + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        if HAS_DW:
            x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :] * stride_xn, mask=ok,
                        other=0.0).to(tl.float32)
            if HAS_MEAN:
                x = x - tl.load(mean_ptr + rows, mask=r_ok, other=0.0)[:, None]
            acc_w += dy * (x * tl.load(rstd_ptr + rows, mask=r_ok, other=0.0)[:, None])
        if HAS_DB:
            acc_b += dy
    if HAS_DW:
        tl.store(dw_ptr + cols, tl.sum(acc_w, axis=0).to(dw_ptr.dtype.element_ty), mask=c_ok)
    if HAS_DB:
        tl.store(db_ptr + cols, tl.sum(acc_b, axis=0).to(db_ptr.dtype.element_ty), mask=c_ok)


# ---------------------------------------------------------------------------------------------
# the backward operators: tilejit::rms_norm_backward, tilejit::layer_norm_backward
# ---------------------------------------------------------------------------------------------
def _rows2(op, name, t, N):
    check_tensor(op, name, t, dtypes=OP_DTYPES)
    if t.shape[-1] != N:
        raise ValueError(f"{op}: {name} has rows of {t.shape[-1]}, expected {N}")
    return t.reshape(-1, N)


def _bwd_shapes(op, x, w, dy, extra, weight_grad, bias_grad=None):
    """(dx, dw[, db]): dw / db are (0,)-shaped when not asked for."""
    check_tensor(op, "x", x, dtypes=OP_DTYPES)
    N = x.shape[-1]
    for name, t in (("dy", dy), *extra):
        if t is not None:
            check_same_dtype(op, "x", x, **{name: t})
            if t.shape != x.shape:
                raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}, expected x's {tuple(x.shape)}")
    wdt = w.dtype if w is not None else x.dtype
    out = [(x.shape, x.dtype), ((N,) if weight_grad and w is not None else (0,), wdt)]
    if bias_grad is not None:
        out.append(((N,) if bias_grad else (0,), wdt))
    return tuple(out)


def _weight_grads(x2, dy2, mean, rstd, dw, db, cfg):
    rows, N = x2.shape
    has_dw, has_db = dw is not None and dw.numel() > 0, db is not None and db.numel() > 0
    if not (has_dw or has_db):
        return
    if rows == 0:
        for t in (dw, db):
            if t is not None:
                t.zero_()
        return
    norm_weight_grad_kernel[(cdiv(N, cfg["BLOCK_C"]),)](
        x2, dy2, mean, rstd, dw if has_dw else None, db if has_db else None, rows, N, x2.stride(0), x2.stride(1),
        dy2.stride(0), HAS_MEAN=mean is not None, HAS_DW=has_dw, HAS_DB=has_db,
        BLOCK_R=cfg["BLOCK_R"], BLOCK_C=cfg["BLOCK_C"])


def _rms_bwd_launch(s, w, dy, dres, eps, weight_grad, config, dx, dw):
    op = "rms_norm_backward"
    check_device(op, s=s, weight=w, dy=dy, dres=dres, dx=dx, dw=dw)
    N = s.shape[-1]
    s2, dy2 = s.reshape(-1, N), _rows2(op, "dy", dy, N).contiguous()
    dr2 = _rows2(op, "dres", dres, N).contiguous() if dres is not None else None
    rows = s2.shape[0]
    if N == 0:
        return
    cfg = decode_config(config) or select(RMS_NORM_BACKWARD, None, N=N)
    rstd = torch.empty(rows, dtype=torch.float32, device=s.device)
    w = w.contiguous() if w is not None else None
    if rows:
        dx2 = dx.view(-1, N)
        rms_norm_bwd_kernel[(rows,)](s2, w, dy2, dr2, dx2, rstd, N, s2.stride(0), s2.stride(1), dy2.stride(0),
                                     dr2.stride(0) if dr2 is not None else 0, dx2.stride(0), eps,
                                     HAS_W=w is not None, HAS_DRES=dr2 is not None, BLOCK=cfg["BLOCK"])
    _weight_grads(s2, dy2, None, rstd, dw, None, cfg)


def _ln_bwd_launch(x, w, dy, eps, weight_grad, bias_grad, config, dx, dw, db):
    op = "layer_norm_backward"
    check_device(op, x=x, weight=w, dy=dy, dx=dx, dw=dw, db=db)
    N = x.shape[-1]
    x2, dy2 = x.reshape(-1, N), _rows2(op, "dy", dy, N).contiguous()
    rows = x2.shape[0]
    if N == 0:
        return
    cfg = decode_config(config) or select(LAYER_NORM_BACKWARD, None, N=N)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    w = w.contiguous() if w is not None else None
    if rows:
        dx2 = dx.view(-1, N)
        layer_norm_bwd_kernel[(rows,)](x2, w, dy2, dx2, mean, rstd, N, x2.stride(0), x2.stride(1), dy2.stride(0),
                                       dx2.stride(0), eps, HAS_W=w is not None, BLOCK=cfg["BLOCK"])
    _weight_grads(x2, dy2, mean, rstd, dw, db, cfg)


def rms_norm_backward_ref(s, w, dy, dres, eps, weight_grad=True):
    """fp64: (dx, dw) by the formulas of the module docstring."""
    s, dy = s.double(), dy.double()
    wd = w.double() if w is not None else None
    rstd = torch.rsqrt((s * s).mean(-1, keepdim=True) + eps)
    g = dy * wd if wd is not None else dy
    dx = (g - s * rstd * rstd * (g * s).mean(-1, keepdim=True)) * rstd
    if dres is not None:
        dx = dx + dres.double()
    dw = (dy * s * rstd).reshape(-1, s.shape[-1]).sum(0) if weight_grad and w is not None else s.new_empty(0)
    return dx, dw


def layer_norm_backward_ref(x, w, dy, eps, weight_grad=True, bias_grad=True):
    """fp64: (dx, dw, db) by the formulas of the module docstring."""
    x, dy = x.double(), dy.double()
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * w.double() if w is not None else dy
    dx = (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)) * rstd
    n = x.shape[-1]
    dw = (dy * xhat).reshape(-1, n).sum(0) if weight_grad and w is not None else x.new_empty(0)
    db = dy.reshape(-1, n).sum(0) if bias_grad else x.new_empty(0)
    return dx, dw, db


RMS_BWD_OP = define(
    "rms_norm_backward", "Tensor s, Tensor? weight, Tensor dy, Tensor? dres, float eps, bool weight_grad, str? config",
    ("dx", "dw"),
    shapes=lambda s, w, dy, dres, eps, wg, cfg: _bwd_shapes("rms_norm_backward", s, w, dy, (("dres", dres),), wg),
    launch=_rms_bwd_launch,
    reference=lambda s, w, dy, dres, eps, wg, cfg: rms_norm_backward_ref(s, w, dy, dres, eps, wg))
LN_BWD_OP = define(
    "layer_norm_backward", "Tensor x, Tensor? weight, Tensor dy, float eps, bool weight_grad, bool bias_grad, "
    "str? config", ("dx", "dw", "db"),
    shapes=lambda x, w, dy, eps, wg, bg, cfg: _bwd_shapes("layer_norm_backward", x, w, dy, (), wg, bg),
    launch=_ln_bwd_launch,
    reference=lambda x, w, dy, eps, wg, bg, cfg: layer_norm_backward_ref(x, w, dy, eps, wg, bg))


# ---------------------------------------------------------------------------------------------
# autograd of the forward operators
# ---------------------------------------------------------------------------------------------
def _grad_or_none(t, needed):
    return t if needed and t.numel() else None


def _rms_setup(ctx, inputs, output):
    x, w, eps, _ = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _rms_backward(ctx, dy):
    x, w = ctx.saved_tensors
    wg = ctx.needs_input_grad[1]
    dx, dw = RMS_BWD_OP(x, w, dy, None, ctx.eps, wg, None)
    return dx, _grad_or_none(dw, wg), None, None


def _add_rms_setup(ctx, inputs, output):
    _, _, w, eps, _ = inputs
    ctx.save_for_backward(output[1], w)   # the rounded sum: what was normalised
    ctx.eps = eps


def _add_rms_backward(ctx, dy, dres):
    s, w = ctx.saved_tensors
    wg = ctx.needs_input_grad[2]
    dx, dw = RMS_BWD_OP(s, w, dy, dres, ctx.eps, wg, None)
    return dx, dx, _grad_or_none(dw, wg), None, None


def _ln_setup(ctx, inputs, output):
    x, w, b, eps, _ = inputs
    ctx.save_for_backward(x, w)
    ctx.eps, ctx.has_b = eps, b is not None


def _ln_backward(ctx, dy):
    x, w = ctx.saved_tensors
    wg, bg = ctx.needs_input_grad[1], ctx.needs_input_grad[2] and ctx.has_b
    dx, dw, db = LN_BWD_OP(x, w, dy, ctx.eps, wg, bg, None)
    return dx, _grad_or_none(dw, wg), _grad_or_none(db, bg), None, None


set_backward("rms_norm", _rms_setup, _rms_backward)
set_backward("add_rms_norm", _add_rms_setup, _add_rms_backward)
set_backward("layer_norm", _ln_setup, _ln_backward)


# ---------------------------------------------------------------------------------------------
# op specs: tuned and defaulted like the forward norms, keyed by the row length
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    cap = max(16, npow2(dims["N"]))
    return {**cfg, "BLOCK": min(cfg["BLOCK"], cap), "BLOCK_C": min(cfg["BLOCK_C"], cap)}


def _problem(op: str):
    def build(s: dict) -> Problem:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(s["rows"], s["N"], generator=g)
        w = torch.randn(s["N"], generator=g)
        dy = torch.randn(s["rows"], s["N"], generator=g)
        if op == "rms_norm_backward":
            def run(cfg):
                return RMS_BWD_OP(x, w, dy, None, 1e-6, True, encode_config(cfg))[0]

            def eager():
                xr = x.detach().requires_grad_()
                (xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * w).backward(dy)
                return xr.grad
            return Problem(run=run, ref=lambda: rms_norm_backward_ref(x, w, dy, None, 1e-6)[0], eager=eager)

        def run_ln(cfg):
            return LN_BWD_OP(x, w, dy, 1e-5, True, True, encode_config(cfg))[0]

        def eager_ln():
            xr = x.detach().requires_grad_()
            torch.nn.functional.layer_norm(xr, (s["N"],), w, None, 1e-5).backward(dy)
            return xr.grad
        return Problem(run=run_ln, ref=lambda: layer_norm_backward_ref(x, w, dy, 1e-5)[0], eager=eager_ln)
    return build


def _probe(op: str):
    def probe(cfg: dict, shape: dict) -> None:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
        n = 2 * cfg["BLOCK"] + 1
        x, w = torch.empty(2, n, dtype=dt), torch.empty(n, dtype=dt)
        if op == "rms_norm_backward":
            RMS_BWD_OP(x, w, x, x, 1e-6, True, encode_config(cfg))
        else:
            LN_BWD_OP(x, w, x, 1e-5, True, True, encode_config(cfg))
    return probe


def _work(op: str):
    passes = 4 if op == "rms_norm_backward" else 7   # row reads of x and dy (and w) per pass, dx, weight grad

    def work(cfg: dict, s: dict) -> Work:
        n = s["N"]
        return Work(programs=s["rows"] + cdiv(n, cfg["BLOCK_C"]), elements=passes * n,
                    segments=cdiv(passes * n, cfg["BLOCK"]), flops=6 * passes * n)
    return work


def _spec(op: str) -> OpSpec:
    return OpSpec(
        name=op,
        key_dims={"N": "exact"},
        space=tuple({"BLOCK": b, "BLOCK_R": r, "BLOCK_C": c}
                    for b in (256, 1024, 4096) for r in (4, 16) for c in (64, 256)),
        spaces={"scratchpad": tuple({"BLOCK": b, "BLOCK_R": 4, "BLOCK_C": c} for b in (32, 64) for c in (16, 32))},
        defaults={"cache": {"BLOCK": 1024, "BLOCK_R": 16, "BLOCK_C": 128},
                  "scratchpad": {"BLOCK": STRICT_BLOCK, "BLOCK_R": STRICT_BLOCK_R, "BLOCK_C": 32},
                  "simt": {"BLOCK": 4096, "BLOCK_R": 16, "BLOCK_C": 64}},
        clamp=_clamp,
        dims_of=lambda s: {"N": s["N"]},
        problem=_problem(op),
        describe=lambda s: f"[{s['rows']}, {s['N']}]",
        probe=_probe(op),
        work=_work(op),
        tune_shapes=({"label": "train", "rows": 512, "N": 4096},),
        quick_shapes=({"label": "tiny", "rows": 4, "N": 64},),
        strict_fixed={"BLOCK": STRICT_BLOCK, "BLOCK_R": STRICT_BLOCK_R},
        bit_neutral=frozenset({"BLOCK_C"}),
    )


RMS_NORM_BACKWARD = _spec("rms_norm_backward")
LAYER_NORM_BACKWARD = _spec("layer_norm_backward")
SPECS = (RMS_NORM_BACKWARD, LAYER_NORM_BACKWARD)

__all__ = ["rms_norm_backward_ref", "layer_norm_backward_ref", "rms_norm_bwd_kernel", "layer_norm_bwd_kernel",
           "norm_weight_grad_kernel", "RMS_BWD_OP", "LN_BWD_OP", "SPECS", "STRICT_BLOCK_R"]
