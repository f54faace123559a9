"""Gated activations of MLPs: silu_and_mul and gelu_and_mul on x = [..., 2d] -> [..., d]:

    out = act(x[..., :d]) * x[..., d:]

act: silu(g) = g * sigmoid(g); gelu tanh approximation g * sigmoid(2u), u = sqrt(2/pi) (g +
0.044715 g^3) (equal to 0.5 g (1 + tanh u), as kernels/matmul.py's epilogue); gelu "erf"
0.5 g (1 + erf(g / sqrt 2)) with erf from Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7,
a fixed sequence of +, *, / and one exp, so strict bits agree on every target):

    t = 1 / (1 + 0.3275911 |z|),  erf|z| = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2)

fp32 arithmetic, one rounding to the input dtype. Elementwise: a program owns BLOCK columns of
one row, so a row's result never depends on the other rows.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import OP_DTYPES, cdiv, check_device, check_out, check_tensor, config_text
from .configs import select
from .op_plans import MISS
from .torch_ops import decode_config, define, require_no_grad

ACTS = {"silu": 0, "gelu_tanh": 1, "gelu_erf": 2}
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


@kernel
def _erf(z):
    a = tl.where(z < 0.0, -z, z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    e = 1.0 - p * tl.exp(-(a * a))
    return tl.where(z < 0.0, -e, e)


@kernel
def act_and_mul_kernel(x_ptr, y_ptr, d, sx, sy, ACT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < d
    g = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * sx + d + cols, mask=m, other=0.0).to(tl.float32)
    if ACT == 0:
        a = g * tl.sigmoid(g)
    elif ACT == 1:
        a = g * tl.sigmoid(2.0 * (0.7978845608028654 * (g + 0.044715 * g * g * g)))
    else:
        a = 0.5 * g * (1.0 + _erf(g * 0.7071067811865476))
    tl.store(y_ptr + row * sy + cols, (a * u).to(y_ptr.dtype.element_ty), mask=m)


def act_and_mul(x: torch.Tensor, activation: str = "silu", *, out: torch.Tensor | None = None,
                config: dict | None = None) -> torch.Tensor:
    """act(x[..., :d]) * x[..., d:] for x = [..., 2d]; activation: "silu", "gelu_tanh" or "gelu_erf".
    Runs as the torch operator tilejit::act_and_mul (tilejit::act_and_mul_out with `out`); no gradient
    (for training: kernels.integrations._ops.act_and_mul on gate and up)."""
    op = f"{activation}_and_mul" if activation in ACTS else "act_and_mul"
    config = config_text(op, SPEC, config)   # a dict hit for a config seen before
    if out is None:
        y = ACT_AND_MUL_OP.replayed(x, activation, config)   # a seen signature: its checks passed
        if y is not MISS:
            return y
    check_tensor(op, "x", x)
    shape = _shape(op, x, activation)[0][0]
    if out is None:
        return ACT_AND_MUL_OP(x, activation, config)
    check_tensor(op, "out", out)
    if tuple(out.shape) != shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError(f"{op}: out must be a contiguous {x.dtype} tensor of shape {shape}, got "
                         f"{out.dtype} {tuple(out.shape)}")
    check_out(op, out, x=x)
    require_no_grad(op, x)
    ACT_AND_MUL_OP.call_out(x, activation, config, out)
    return out


def _shape(op, x, activation):
    if activation not in ACTS:
        raise ValueError(f"act_and_mul: activation must be one of {', '.join(ACTS)}, got {activation!r}")
    check_tensor(op, "x", x, dtypes=OP_DTYPES)
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"{op}: the last dim of x must be even ([..., 2d]), got shape {tuple(x.shape)}")
    return (((*x.shape[:-1], x.shape[-1] // 2), x.dtype),)


def _launch(x, activation, config, out):
    op = f"{activation}_and_mul"
    check_device(op, x=x, out=out)
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, 2 * d)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    rows = x2.shape[0]
    if rows == 0 or d == 0:
        return
    y2 = out.view(-1, d)
    cfg = decode_config(config) or select(SPEC, None, d=d)
    act_and_mul_kernel[(rows, cdiv(d, cfg["BLOCK"]))](x2, y2, d, x2.stride(0), y2.stride(0), ACT=ACTS[activation],
                                                      **cfg)


def silu_and_mul(x, *, out=None, config=None):
    return act_and_mul(x, "silu", out=out, config=config)


def gelu_and_mul(x, approximate: str = "tanh", *, out=None, config=None):
    """approximate: "tanh" or "none" (erf)."""
    if approximate not in ("tanh", "none"):
        raise ValueError(f"gelu_and_mul: approximate must be 'tanh' or 'none', got {approximate!r}")
    return act_and_mul(x, "gelu_tanh" if approximate == "tanh" else "gelu_erf", out=out, config=config)


def act_and_mul_ref(x, activation="silu", out_dtype=None):
    d = x.shape[-1] // 2
    g, u = x.double()[..., :d], x.double()[..., d:]
    if activation == "silu":
        a = torch.nn.functional.silu(g)
    else:
        a = torch.nn.functional.gelu(g, approximate="tanh" if activation == "gelu_tanh" else "none")
    return (a * u).to(out_dtype or x.dtype)


def _eager(x, activation):
    d = x.shape[-1] // 2
    if activation == "silu":
        return torch.nn.functional.silu(x[..., :d]) * x[..., d:]
    return torch.nn.functional.gelu(x[..., :d], approximate="tanh" if activation == "gelu_tanh" else "none") * x[..., d:]


def _problem(s: dict) -> Problem:
    x = torch.randn(s["rows"], 2 * s["d"], generator=torch.Generator().manual_seed(0))
    return Problem(run=lambda cfg: act_and_mul(x, s.get("act", "silu"), config=cfg),
                   ref=lambda: act_and_mul_ref(x, s.get("act", "silu"), out_dtype=torch.float64),
                   eager=lambda: _eager(x, s.get("act", "silu")))


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    for act in ACTS:
        act_and_mul(torch.zeros(2, 4 * cfg["BLOCK"] + 2, dtype=dt), act, config=cfg)


SPEC = OpSpec(
    name="act_and_mul",
    key_dims={"d": "align32"},
    space=tuple({"BLOCK": b} for b in (64, 128, 256, 512, 1024, 2048)),
    spaces={"scratchpad": tuple({"BLOCK": b} for b in (64, 128, 256))},
    defaults={"cache": {"BLOCK": 1024}, "scratchpad": {"BLOCK": 256}, "simt": {"BLOCK": 1024}},
    clamp=lambda cfg, dims: {**cfg, "BLOCK": min(cfg["BLOCK"], max(64, npow2(dims["d"])))},
    dims_of=lambda s: {"d": s["d"]},
    problem=_problem,
    describe=lambda s: f"[{s['rows']}, 2x{s['d']}] {s.get('act', 'silu')}",
    probe=_probe,
    work=lambda cfg, s: Work(programs=s["rows"] * cdiv(s["d"], cfg["BLOCK"]), elements=3 * cfg["BLOCK"],
                             segments=3, flops=12 * cfg["BLOCK"]),
    tune_shapes=({"label": "prefill mlp", "rows": 256, "d": 11008},),
    quick_shapes=({"label": "tiny", "rows": 4, "d": 96},),
    bit_neutral=frozenset({"BLOCK"}),   # elementwise
)
SPECS = (SPEC,)

ACT_AND_MUL_OP = define("act_and_mul", "Tensor x, str activation, str? config", ("y",),
                        shapes=lambda x, act, cfg: _shape(f"{act}_and_mul", x, act), launch=_launch,
                        reference=lambda x, act, cfg: (act_and_mul_ref(x, act, torch.float64),))

__all__ = ["act_and_mul", "silu_and_mul", "gelu_and_mul", "act_and_mul_ref", "act_and_mul_kernel", "ACTS",
           "SPEC", "SPECS", "ACT_AND_MUL_OP"]
