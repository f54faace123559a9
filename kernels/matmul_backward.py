"""Backward of matmul (C = act(A @ B + bias)): the autograd formula of tilejit::matmul.

    Z = A @ B + bias (recomputed, rounded to the input dtype as torch's autograd keeps it)
    dZ = dC * act'(Z)          relu: [Z > 0]; silu: s (1 + Z (1 - s)), s = sigmoid(Z);
                               gelu (tanh form, = x sigmoid(2u)): s + 2 Z s (1 - s) u', s = sigmoid(2u)
    dA = dZ @ B^T,  dB = A^T @ dZ,  dbias = the column sums of dZ

The products run on the forward's `matmul_kernel` over transposed views (no copies, except where a
2-D operand was shared by every batch: its gradient sums over the batch, done as one product over
the batch-stacked rows). Every element of a product is one ascending fma chain over its reduction
(for dB of a shared weight: over all rows of every batch, in order), and the bias gradient is
`norm_weight_grad_kernel`'s fixed-order column sum: deterministic, no atomics.

Configs come from the forward's N and K only (the weight dims, never the rows): the matmul block
sizes change no bit; BLOCK_R (the column sums' order) is fixed in the strict policy.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device
from .configs import select
from .matmul import ACTIVATIONS, CACHE_DEFAULT, SCRATCH_MID, SPEC as MATMUL_SPEC, _batch_view, _clamp as _mm_clamp, _shapes as _fwd_shapes, matmul_kernel
from .norm_backward import STRICT_BLOCK_R, norm_weight_grad_kernel
from .torch_ops import decode_config, define, encode_config, set_backward


@kernel
def act_grad_kernel(z_ptr, dc_ptr, dz_ptr, R, N, szr, szn, sdr, sdn, sor, son, ACTIVATION: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dZ = dC * act'(Z) over a [R, N] tile grid."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (rm < R)[:, None] & (rn < N)[None, :]
    rm64 = rm.to(tl.int64)
    z = tl.load(z_ptr + rm64[:, None] * szr + rn[None, :] * szn, mask=ok, other=0.0).to(tl.float32)
    dc = tl.load(dc_ptr + rm64[:, None] * sdr + rn[None, :] * sdn, mask=ok, other=0.0).to(tl.float32)
    d = dc
    if ACTIVATION == 1:
        d = tl.where(z > 0.0, dc, 0.0)
    if ACTIVATION == 2:
        u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        du = 0.7978845608028654 * (1.0 + 0.134145 * z * z)
        s = tl.sigmoid(2.0 * u)
        d = dc * (s + 2.0 * z * s * (1.0 - s) * du)
    if ACTIVATION == 3:
        s = tl.sigmoid(z)
        d = dc * (s * (1.0 + z * (1.0 - s)))
    tl.store(dz_ptr + rm64[:, None] * sor + rn[None, :] * son, d.to(dz_ptr.dtype.element_ty), mask=ok)


def _product(x, y, out, cfg, bias=None):
    """out = x @ y (+ bias) on matmul_kernel; x [Z?, M, K], y [Z?, K, N] as views of any strides."""
    zx, szx, M, K, sxm, sxk = _batch_view(x)
    zy, szy, _, N, syk, syn = _batch_view(y)
    Z = max(zx, zy)
    if M == 0 or N == 0 or Z == 0:
        return
    if K == 0:
        out.zero_()
        return
    _, szo, _, _, som, son = _batch_view(out)
    c = _mm_clamp(cfg, {"N": N, "K": K})
    matmul_kernel[(cdiv(M, c["BLOCK_M"]), cdiv(N, c["BLOCK_N"]), Z)](
        x, y, out, bias, M, N, K, szx, sxm, sxk, szy, syk, syn, szo, som, son,
        bias.stride(0) if bias is not None else 0, HAS_BIAS=bias is not None, ACTIVATION=0, MIXED=False,
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"])


def _rows(t):
    """A [Z, M, N] or [M, N] tensor as [Z*M, N] rows (a view when possible)."""
    return t.reshape(-1, t.shape[-1])


def _dz(a, b, bias, dc, activation, cfg):
    """dZ, with the shape of C."""
    if activation is None:
        return dc
    z = torch.empty(dc.shape, dtype=dc.dtype, device=dc.device)
    _product(a, b, z, cfg, bias)
    z2, dc2 = _rows(z), _rows(dc)
    dz = torch.empty(z2.shape, dtype=dc.dtype, device=dc.device)
    R, N = z2.shape
    if R and N:
        act_grad_kernel[(cdiv(R, cfg["BLOCK_M"]), cdiv(N, cfg["BLOCK_N"]))](
            z2, dc2, dz, R, N, *z2.stride(), *dc2.stride(), *dz.stride(), ACTIVATION=ACTIVATIONS[activation],
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"])
    return dz.view(dc.shape)


def _launch(a, b, bias, dc, activation, need_a, need_b, need_bias, config, da, db, dbias):
    op = "matmul_backward"
    check_device(op, a=a, b=b, bias=bias, dc=dc, da=da, db=db, dbias=dbias)
    za, _, M, K, _, _ = _batch_view(a)
    zb, _, _, N, _, _ = _batch_view(b)
    Z = max(za, zb)
    cfg = decode_config(config) or select(MATMUL_BACKWARD, None, N=N, K=K)
    dz = _dz(a, b, bias, dc, activation, cfg)
    dz3 = dz if dz.dim() == 3 else dz.unsqueeze(0)
    if need_a:
        if za == Z or Z == 1:     # per batch: dA_z = dZ_z @ B_z^T
            _product(dz, b.transpose(-1, -2), da, cfg)
        else:                     # a shared by every batch: sum over z, as one product over stacked N
            bt = b.transpose(-1, -2).expand(Z, N, K).reshape(Z * N, K)
            _product(dz3.permute(1, 0, 2).reshape(M, Z * N), bt, da.view(M, K), cfg)
    if need_b:
        if zb == Z or Z == 1:
            _product(a.transpose(-1, -2), dz, db, cfg)
        else:                     # b shared: dB = sum_z A_z^T dZ_z, one chain over every row
            _product(a.expand(Z, M, K).reshape(Z * M, K).t(), _rows(dz), db.view(K, N), cfg)
    if need_bias:
        dz2 = _rows(dz).contiguous()
        if dz2.shape[0] == 0:
            dbias.zero_()
        elif N:
            norm_weight_grad_kernel[(cdiv(N, cfg["BLOCK_C"]),)](
                None, dz2, None, None, None, dbias, dz2.shape[0], N, 0, 0, dz2.stride(0), HAS_MEAN=False,
                HAS_DW=False, HAS_DB=True, BLOCK_R=cfg["BLOCK_R"], BLOCK_C=cfg["BLOCK_C"])


def _shapes(a, b, bias, dc, activation, need_a, need_b, need_bias, config):
    (c_shape, _), = _fwd_shapes(a, b, bias, activation, None, None)   # the forward's checks
    dt = a.dtype
    if any(t is not None and t.dtype != dt for t in (b, bias)):
        raise TypeError(f"matmul_backward: a, b, bias and dc must share one dtype (the autograd formula "
                        f"promotes mixed inputs first), got a {a.dtype}, b {b.dtype}")
    if tuple(dc.shape) != tuple(c_shape) or dc.dtype != dt:
        raise ValueError(f"matmul_backward: dc has shape {tuple(dc.shape)} ({dc.dtype}), expected {tuple(c_shape)} "
                         f"({dt})")
    return ((a.shape if need_a else (0,), dt), (b.shape if need_b else (0,), dt),
            ((b.shape[-1],) if need_bias and bias is not None else (0,), dt))


def _act_grad_ref(z, activation):
    if activation == "relu":
        return (z > 0).to(z.dtype)
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    if activation == "gelu":
        u = 0.7978845608028654 * (z + 0.044715 * z ** 3)
        s = torch.sigmoid(2 * u)
        return s + 2 * z * s * (1 - s) * 0.7978845608028654 * (1 + 3 * 0.044715 * z * z)
    return torch.ones_like(z)


def matmul_backward_ref(a, b, bias, dc, activation, need_a=True, need_b=True, need_bias=True):
    """fp64 (da, db, dbias) by the formulas of the module docstring ((0,)-shaped when not asked for)."""
    a, b, dc = a.double(), b.double(), dc.double()
    z = torch.matmul(a, b) + (bias.double() if bias is not None else 0)
    dz = dc * _act_grad_ref(z, activation)
    empty = a.new_empty(0)
    da = torch.matmul(dz, b.transpose(-1, -2)).sum_to_size(a.shape) if need_a else empty
    db = torch.matmul(a.transpose(-1, -2), dz).sum_to_size(b.shape) if need_b else empty
    dbias = dz.reshape(-1, dz.shape[-1]).sum(0) if need_bias and bias is not None else empty
    return da, db, dbias


BWD_OP = define(
    "matmul_backward", "Tensor a, Tensor b, Tensor? bias, Tensor dc, str? activation, bool need_a, bool need_b, "
    "bool need_bias, str? config", ("da", "db", "dbias"), shapes=_shapes, launch=_launch,
    reference=lambda a, b, bias, dc, act, na, nb, nbias, cfg: matmul_backward_ref(a, b, bias, dc, act, na, nb, nbias))


def _setup(ctx, inputs, output):
    a, b, bias, activation, _, _ = inputs
    ctx.save_for_backward(a, b, bias)
    ctx.activation = activation


def _backward(ctx, dc):
    a, b, bias = ctx.saved_tensors
    na, nb, nbias = ctx.needs_input_grad[:3]
    # mixed dtypes (or an out_dtype): the formula runs in their promoted dtype, each gradient is
    # rounded to its input's dtype
    dt = a.dtype
    for t in (b, bias, dc):
        dt = dt if t is None else torch.promote_types(dt, t.dtype)
    as_dt = (lambda t: t if t is None or t.dtype == dt else t.to(dt))
    da, db, dbias = BWD_OP(as_dt(a), as_dt(b), as_dt(bias), as_dt(dc).contiguous(), ctx.activation, na, nb,
                           nbias and bias is not None, None)
    return ((da.to(a.dtype) if na else None), (db.to(b.dtype) if nb else None),
            (dbias.to(bias.dtype) if nbias and bias is not None else None), None, None, None)


set_backward("matmul", _setup, _backward)


# ---------------------------------------------------------------------------------------------
# the op spec: keyed by the forward's N and K (never M or the batch)
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    cap = max(16, npow2(max(dims["N"], dims["K"])))
    return {**cfg, "BLOCK_N": min(cfg["BLOCK_N"], cap), "BLOCK_K": min(cfg["BLOCK_K"], cap),
            "BLOCK_C": min(cfg["BLOCK_C"], max(16, npow2(dims["N"])))}


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(s["M"], s["K"], generator=g)
    b = torch.randn(s["K"], s["N"], generator=g) * s["K"] ** -0.5
    bias = torch.randn(s["N"], generator=g)
    dc = torch.randn(s["M"], s["N"], generator=g)

    def eager():
        ar, br = a.detach().requires_grad_(), b.detach().requires_grad_()
        torch.nn.functional.silu(ar @ br + bias).backward(dc)
        return br.grad
    return Problem(run=lambda cfg: BWD_OP(a, b, bias, dc, "silu", True, True, True, encode_config(cfg))[1],
                   ref=lambda: matmul_backward_ref(a, b, bias, dc, "silu")[1], eager=eager)


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    a, b = torch.empty(2 * bm, 2 * bk, dtype=dt), torch.empty(2 * bk, 2 * bn, dtype=dt)
    BWD_OP(a, b, torch.empty(2 * bn, dtype=dt), torch.empty(2 * bm, 2 * bn, dtype=dt), "silu", True, True, True,
              encode_config(cfg))


def _work(cfg: dict, s: dict) -> Work:
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    M, N, K = s["M"], s["N"], s["K"]
    programs = cdiv(M, bm) * (cdiv(N, bn) * 2 + cdiv(K, bn)) + cdiv(K, bm) * cdiv(N, bn)
    steps = cdiv(max(M, N, K), bk)
    return Work(programs=programs, elements=steps * (bm * bk + bk * bn) + bm * bn, segments=steps * (bm + bk) + bm,
                flops=2 * bm * bn * bk * steps)


MATMUL_BACKWARD = OpSpec(
    name="matmul_backward",
    key_dims={"N": "align32", "K": "align32"},
    space=tuple({**c, "BLOCK_R": 16, "BLOCK_C": 128} for c in MATMUL_SPEC.space),
    spaces={"scratchpad": tuple({**c, "BLOCK_R": STRICT_BLOCK_R, "BLOCK_C": 32}
                                for c in MATMUL_SPEC.spaces["scratchpad"])},
    defaults={"cache": {**CACHE_DEFAULT, "BLOCK_R": 16, "BLOCK_C": 128},
              "scratchpad": {**SCRATCH_MID, "BLOCK_R": STRICT_BLOCK_R, "BLOCK_C": 32},
              "simt": {**MATMUL_SPEC.defaults["simt"], "BLOCK_R": 16, "BLOCK_C": 64}},
    clamp=_clamp,
    dims_of=lambda s: {"N": s["N"], "K": s["K"]},
    problem=_problem,
    describe=lambda s: f"{s['M']}x{s['N']}x{s['K']}",
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "train qkv-proj", "M": 512, "N": 1024, "K": 1024},),
    quick_shapes=({"label": "tiny", "M": 16, "N": 64, "K": 32},),
    strict_fixed={"BLOCK_R": STRICT_BLOCK_R},
    bit_neutral=frozenset({"BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_C"}),
)
SPECS = (MATMUL_BACKWARD,)

__all__ = ["matmul_backward_ref", "act_grad_kernel", "BWD_OP", "MATMUL_BACKWARD", "SPECS"]
