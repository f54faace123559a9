"""Two small elementwise ops the model integrations need: rotary position embedding applied to
q or k, and act(gate) * up (the gated MLP). Private to the integrations (torch operators
tilejit::hf_rope and tilejit::hf_act_and_mul), until the library has its own rope / silu_and_mul
ops; then `rope` and `act_and_mul` here become calls to those.

rope(x, cos, sin) = x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1) over the
last dim (the Llama/Qwen2/Mistral convention; cos/sin broadcast to x, e.g. [B, 1, S, D] for
x [B, H, S, D]): per half, y1 = x1 c1 - x2 s1 and y2 = x2 c2 + x1 s2, each product rounded, then the
sum: the same operations, so the same fp32 bits, as the torch expression. act_and_mul computes in
fp32 and rounds once. Both are elementwise, so no block size changes a bit: the blocks follow the
target's tile class (no op spec, nothing to tune).

Gradients: rope's with respect to x (its inverse rotation: the same kernel with INVERSE); none
for cos/sin (a clear error if one is needed). act_and_mul's for gate and up.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import npow2

from ..checks import OP_DTYPES, cdiv, check_device, check_same_dtype, check_tensor, current_target
from ..matmul import _tanh_free_gelu
from ..matmul_backward import _act_grad_ref
from ..op_plans import MISS
from ..torch_ops import define, no_gradient_for, set_backward

ACTIVATIONS = {"silu": 1, "gelu": 2}   # gelu: the tanh approximation


@kernel
def rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, R, A1, A2, HALF,
                sx0, sx1, sx2, sxd, sc0, sc1, sc2, scd, ss0, ss1, ss2, ssd,
                INVERSE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rows r = (i0, i1, i2) of a 4-D [A0, A1, A2, 2*HALF] x; y is contiguous."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    j = tl.arange(0, BLOCK_H)
    ok = (r < R)[:, None] & (j < HALF)[None, :]
    r64 = r.to(tl.int64)
    # the row's (i0, i1, i2) in int32 (a Kunlun core divides in 32 bits), widened for the addresses
    i0 = (r // (A1 * A2)).to(tl.int64)
    i1 = ((r // A2) % A1).to(tl.int64)
    i2 = (r % A2).to(tl.int64)
    xo = (i0 * sx0 + i1 * sx1 + i2 * sx2)[:, None] + j[None, :] * sxd
    co = (i0 * sc0 + i1 * sc1 + i2 * sc2)[:, None] + j[None, :] * scd
    so = (i0 * ss0 + i1 * ss1 + i2 * ss2)[:, None] + j[None, :] * ssd
    x1 = tl.load(x_ptr + xo, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + xo + HALF * sxd, mask=ok, other=0.0).to(tl.float32)
    c1 = tl.load(cos_ptr + co, mask=ok, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + co + HALF * scd, mask=ok, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + so, mask=ok, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + so + HALF * ssd, mask=ok, other=0.0).to(tl.float32)
    if INVERSE:   # the transpose of the rotation: the gradient with respect to x
        y1 = x1 * c1 + x2 * s2
        y2 = x2 * c2 - x1 * s1
    else:
        y1 = x1 * c1 - x2 * s1
        y2 = x2 * c2 + x1 * s2
    yo = r64[:, None] * (2 * HALF) + j[None, :]
    tl.store(y_ptr + yo, y1.to(y_ptr.dtype.element_ty), mask=ok)
    tl.store(y_ptr + yo + HALF, y2.to(y_ptr.dtype.element_ty), mask=ok)


@kernel
def _act(g, ACTIVATION: tl.constexpr):
    if ACTIVATION == 1:
        a = g * tl.sigmoid(g)
    else:
        a = _tanh_free_gelu(g)   # matmul's gelu epilogue: the same bits
    return a


@kernel
def act_and_mul_kernel(g_ptr, u_ptr, y_ptr, dy_ptr, dg_ptr, R, N, sgr, sgn, sur, sun, sdr,
                       ACTIVATION: tl.constexpr, BACKWARD: tl.constexpr,
                       BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """y = act(g) * u; with BACKWARD: dg = dy * u * act'(g) into dg_ptr and du = dy * act(g) into y_ptr."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (r < R)[:, None] & (c < N)[None, :]
    r64 = r.to(tl.int64)
    g = tl.load(g_ptr + r64[:, None] * sgr + c[None, :] * sgn, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + r64[:, None] * sur + c[None, :] * sun, mask=ok, other=0.0).to(tl.float32)
    yo = r64[:, None] * N + c[None, :]
    if BACKWARD:
        dy = tl.load(dy_ptr + r64[:, None] * sdr + c[None, :], mask=ok, other=0.0).to(tl.float32)
        if ACTIVATION == 1:
            s = tl.sigmoid(g)
            da = s * (1.0 + g * (1.0 - s))
        else:
            t = 0.7978845608028654 * (g + 0.044715 * g * g * g)
            s = tl.sigmoid(2.0 * t)
            da = s + 2.0 * g * s * (1.0 - s) * 0.7978845608028654 * (1.0 + 0.134145 * g * g)
        tl.store(dg_ptr + yo, (dy * u * da).to(dg_ptr.dtype.element_ty), mask=ok)
        tl.store(y_ptr + yo, (dy * _act(g, ACTIVATION)).to(y_ptr.dtype.element_ty), mask=ok)
    else:
        tl.store(y_ptr + yo, (_act(g, ACTIVATION) * u).to(y_ptr.dtype.element_ty), mask=ok)


def _rows_per_program(width: int) -> int:
    """Rows per program: a few KB of tiles on a scratchpad target, more elsewhere (no bit depends on it)."""
    budget = {"scratchpad": 256, "simt": 4096}.get(current_target().caps.tile_class, 2048)
    return max(1, min(64, budget // max(1, npow2(width))))


# ---------------------------------------------------------------------------------------------
# rope
# ---------------------------------------------------------------------------------------------
def _rope_shapes(x, cos, sin, inverse):
    op = "rope"
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        check_tensor(op, name, t, dims=4, dtypes=OP_DTYPES)
    check_same_dtype(op, "x", x, cos=cos, sin=sin)
    if x.shape[-1] % 2:
        raise ValueError(f"{op}: the last dim of x ({x.shape[-1]}) must be even")
    for name, t in (("cos", cos), ("sin", sin)):
        if any(a not in (1, b) for a, b in zip(t.shape, x.shape)) or t.shape[-1] != x.shape[-1]:
            raise ValueError(f"{op}: {name} of shape {tuple(t.shape)} does not broadcast to x's {tuple(x.shape)}")
    return ((x.shape, x.dtype),)


def _rope_launch(x, cos, sin, inverse, y):
    check_device("rope", x=x, cos=cos, sin=sin, y=y)
    A0, A1, A2, D = x.shape
    R, half = A0 * A1 * A2, D // 2
    if R == 0 or half == 0:
        return
    c, s = cos.expand(x.shape), sin.expand(x.shape)
    br = _rows_per_program(D)
    rope_kernel[(cdiv(R, br),)](x, c, s, y, R, A1, A2, half, *x.stride(), *c.stride(), *s.stride(),
                                INVERSE=inverse, BLOCK_R=br, BLOCK_H=npow2(half))


def _rope_ref(x, cos, sin, inverse):
    x, c, s = x.double(), cos.double(), sin.double()
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    if inverse:
        return (torch.cat([x1 * c[..., :h] + x2 * s[..., h:], x2 * c[..., h:] - x1 * s[..., :h]], -1),)
    return (torch.cat([x1 * c[..., :h] - x2 * s[..., :h], x2 * c[..., h:] + x1 * s[..., h:]], -1),)


ROPE_OP = define("hf_rope", "Tensor x, Tensor cos, Tensor sin, bool inverse", ("y",), shapes=_rope_shapes,
                 launch=_rope_launch, reference=_rope_ref)


def _rope_setup(ctx, inputs, output):
    no_gradient_for(ctx, "hf_rope", {1: "cos", 2: "sin"})
    _, cos, sin, inverse = inputs
    ctx.save_for_backward(cos, sin)
    ctx.inverse = inverse


def _rope_backward(ctx, dy):
    cos, sin = ctx.saved_tensors
    return ROPE_OP(dy.contiguous(), cos, sin, not ctx.inverse), None, None, None


set_backward("hf_rope", _rope_setup, _rope_backward)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin; x 4-D, cos/sin broadcastable to it (same dtype)."""
    y = ROPE_OP.replayed(x, cos, sin, False)   # a seen signature: its checks passed
    if y is not MISS:
        return y
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        check_tensor("rope", name, t)
    return ROPE_OP(x, cos, sin, False)


# ---------------------------------------------------------------------------------------------
# act_and_mul
# ---------------------------------------------------------------------------------------------
def _am_shapes(gate, up, activation):
    op = "act_and_mul"
    check_tensor(op, "gate", gate, dtypes=OP_DTYPES)
    check_tensor(op, "up", up, dtypes=OP_DTYPES)
    check_same_dtype(op, "gate", gate, up=up)
    if gate.shape != up.shape:
        raise ValueError(f"{op}: gate {tuple(gate.shape)} and up {tuple(up.shape)} must have the same shape")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
    return ((gate.shape, gate.dtype),)


def _am_run(gate, up, activation, y, dy=None, dg=None):
    check_device("act_and_mul", gate=gate, up=up, y=y, dy=dy, dg=dg)
    N = gate.shape[-1] if gate.dim() else 1
    g2, u2 = gate.reshape(-1, N), up.reshape(-1, N)
    R = g2.shape[0]
    if R == 0 or N == 0:
        return
    bc = min(npow2(N), 64 if current_target().caps.tile_class == "scratchpad" else 256)
    br = _rows_per_program(bc)
    d2 = dy.reshape(-1, N) if dy is not None else None
    act_and_mul_kernel[(cdiv(R, br), cdiv(N, bc))](
        g2, u2, y, d2, dg, R, N, *g2.stride(), *u2.stride(), d2.stride(0) if d2 is not None else 0,
        ACTIVATION=ACTIVATIONS[activation], BACKWARD=dy is not None, BLOCK_R=br, BLOCK_C=bc)


def _am_act_ref(g, activation):
    if activation == "silu":
        return g * torch.sigmoid(g)
    return torch.nn.functional.gelu(g, approximate="tanh")


AM_OP = define("hf_act_and_mul", "Tensor gate, Tensor up, str activation", ("y",), shapes=_am_shapes,
               launch=_am_run,
               reference=lambda g, u, act: (_am_act_ref(g.double(), act) * u.double(),))


def _am_bwd_shapes(gate, up, dy, activation):
    (shape, dt), = _am_shapes(gate, up, activation)
    if dy.shape != shape:
        raise ValueError(f"act_and_mul_backward: dy has shape {tuple(dy.shape)}, expected {tuple(shape)}")
    return (shape, dt), (shape, dt)


def _am_bwd_ref(g, u, dy, activation):
    g, u, dy = g.double(), u.double(), dy.double()
    return dy * u * _act_grad_ref(g, activation), dy * _am_act_ref(g, activation)


AM_BWD_OP = define("hf_act_and_mul_backward", "Tensor gate, Tensor up, Tensor dy, str activation", ("dgate", "dup"),
                   shapes=_am_bwd_shapes,
                   launch=lambda g, u, dy, act, dg, du: _am_run(g, u, act, du, dy.contiguous(), dg),
                   reference=_am_bwd_ref)


def _am_setup(ctx, inputs, output):
    gate, up, activation = inputs
    ctx.save_for_backward(gate, up)
    ctx.activation = activation


def _am_backward(ctx, dy):
    gate, up = ctx.saved_tensors
    dg, du = AM_BWD_OP(gate, up, dy, ctx.activation)
    return dg, du, None


set_backward("hf_act_and_mul", _am_setup, _am_backward)


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """act(gate) * up, elementwise (gate/up may be strided views, e.g. halves of one fused projection)."""
    y = AM_OP.replayed(gate, up, activation)
    if y is not MISS:
        return y
    check_tensor("act_and_mul", "gate", gate)
    check_tensor("act_and_mul", "up", up)
    return AM_OP(gate, up, activation)


__all__ = ["rope", "act_and_mul", "ROPE_OP", "AM_OP", "AM_BWD_OP", "ACTIVATIONS"]
