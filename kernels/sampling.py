"""Sampling helpers over logits [rows, V]: greedy (argmax, ties to the lowest index) and
softmax / log_softmax with a temperature.

argmax is a two-step reduction with today's ops: the row maximum m (a BLOCK-wide running
maximum folded by tl.max), then the lowest index whose value equals m (a running minimum of
where(x == m, index, V), folded by tl.min). Max and min are exact and order-free, so the index is
the same on every target, in either policy, for any BLOCK. Logits are expected to be finite:
where they hold NaN the index is unspecified. Indices are computed in int32 (V < 2**31) and
returned as int64, like torch.argmax.

softmax / log_softmax of x / temperature in fp32: the row maximum, then sum(exp(x - m)) in a
BLOCK-wide fp32 tile (element j sums columns j, j+BLOCK, ... in ascending order) folded by one
tl.sum, then the outputs (log_softmax = x - m - log(sum)); rounded once to the output dtype
(the input's, or fp32 with out_dtype). BLOCK depends only on V (and is STRICT_BLOCK in the strict
policy), so a row's result never depends on the batch.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device, check_tensor
from .configs import select

STRICT_BLOCK = 128


@kernel
def _row_max(x_row, V, scale, BLOCK: tl.constexpr):
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
        acc = tl.maximum(acc, x)
    return tl.max(acc, axis=0)


@kernel
def argmax_kernel(x_ptr, idx_ptr, V, sx, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    m = _row_max(x_row, V, 1.0, BLOCK)
    best = tl.full([BLOCK], V, tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        best = tl.minimum(best, tl.where((x == m) & (cols < V), cols, V))
    tl.store(idx_ptr + row, tl.min(best, axis=0))


@kernel
def softmax_kernel(x_ptr, y_ptr, V, sx, sy, scale, LOG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx
    m = _row_max(x_row, V, scale, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
        acc += tl.where(cols < V, tl.exp(x - m), 0.0)
    total = tl.sum(acc, axis=0)
    log_total = tl.log(total)
    inv = 1.0 / total
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=0.0).to(tl.float32) * scale
        if LOG:
            y = x - m - log_total
        else:
            y = tl.exp(x - m) * inv
        tl.store(y_ptr + row * sy + cols, y.to(y_ptr.dtype.element_ty), mask=cols < V)


def _logits(op, x):
    check_tensor(op, "logits", x)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"{op}: logits must have a non-empty last dim (the vocabulary), got shape {tuple(x.shape)}")
    if x.shape[-1] >= 2 ** 31:
        raise ValueError(f"{op}: a vocabulary of {x.shape[-1]} entries needs 64-bit indices; at most 2**31 - 1")
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(1) == 1 else x2.contiguous()


def greedy(logits: torch.Tensor, *, config: dict | None = None) -> torch.Tensor:
    """argmax over the last dim (ties to the lowest index), int64 [*logits.shape[:-1]]."""
    op = "greedy"
    x2 = _logits(op, logits)
    check_device(op, logits=logits)
    idx = torch.empty(x2.shape[0], dtype=torch.int32, device=logits.device)
    if x2.shape[0]:
        cfg = dict(config) if config else select(ARGMAX, None, V=x2.shape[1])
        argmax_kernel[(x2.shape[0],)](x2, idx, x2.shape[1], x2.stride(0), **cfg)
    return idx.to(torch.int64).reshape(logits.shape[:-1])


def _softmax(op, log, logits, temperature, out_dtype, config):
    x2 = _logits(op, logits)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"{op}: temperature must be a positive number, got {temperature!r}")
    if out_dtype not in (None, torch.float32, logits.dtype):
        raise TypeError(f"{op}: out_dtype must be None, torch.float32 or the logits' dtype, got {out_dtype}")
    check_device(op, logits=logits)
    y = torch.empty(x2.shape, dtype=out_dtype or logits.dtype, device=logits.device)
    if x2.shape[0]:
        cfg = dict(config) if config else select(SOFTMAX, None, V=x2.shape[1])
        softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), y.stride(0), 1.0 / float(temperature),
                                       LOG=log, **cfg)
    return y.reshape(logits.shape)


def softmax(logits, temperature: float = 1.0, *, out_dtype=None, config=None):
    """softmax(logits / temperature) over the last dim."""
    return _softmax("softmax", False, logits, temperature, out_dtype, config)


def log_softmax(logits, temperature: float = 1.0, *, out_dtype=None, config=None):
    """log_softmax(logits / temperature) over the last dim."""
    return _softmax("log_softmax", True, logits, temperature, out_dtype, config)


def greedy_ref(logits):
    """The lowest index of the maximum (torch.argmax does not promise which of equal values it picks)."""
    x = logits.double()
    m = x.max(-1, keepdim=True).values
    V = x.shape[-1]
    return torch.where(x == m, torch.arange(V), V).min(-1).values


def softmax_ref(logits, temperature=1.0, log=False, out_dtype=None):
    x = logits.double() / temperature
    y = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
    return y.to(out_dtype or logits.dtype)


# ---------------------------------------------------------------------------------------------
# op specs
# ---------------------------------------------------------------------------------------------
def _problem(op):
    def build(s: dict) -> Problem:
        x = torch.randn(s["rows"], s["V"], generator=torch.Generator().manual_seed(0)) * 4
        if op == "greedy":
            return Problem(run=lambda cfg: greedy(x, config=cfg).double(), ref=lambda: greedy_ref(x).double(),
                           eager=lambda: torch.argmax(x, -1), tol=0.0)
        return Problem(run=lambda cfg: log_softmax(x, config=cfg),
                       ref=lambda: softmax_ref(x, log=True, out_dtype=torch.float64),
                       eager=lambda: torch.log_softmax(x, -1))
    return build


def _probe(op):
    def probe(cfg: dict, shape: dict) -> None:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
        x = torch.zeros(2, 2 * cfg["BLOCK"] + 1, dtype=dt)
        if op == "greedy":
            greedy(x, config=cfg)
        else:
            softmax(x, config=cfg)
            log_softmax(x, config=cfg)
    return probe


def _spec(op, strict_fixed):
    return OpSpec(
        name=op,
        key_dims={"V": "align32"},
        space=tuple({"BLOCK": b} for b in (128, 256, 512, 1024, 2048, 4096)),
        spaces={"scratchpad": tuple({"BLOCK": b} for b in (64, 128, 256))},
        defaults={"cache": {"BLOCK": 1024}, "scratchpad": {"BLOCK": 128}, "simt": {"BLOCK": 4096}},
        clamp=lambda cfg, dims: {**cfg, "BLOCK": min(cfg["BLOCK"], max(16, npow2(dims["V"])))},
        dims_of=lambda s: {"V": s["V"]},
        problem=_problem(op),
        describe=lambda s: f"[{s['rows']}, {s['V']}]",
        probe=_probe(op),
        work=lambda cfg, s: Work(programs=s["rows"], elements=(2 if op == "greedy" else 4) * s["V"],
                                 segments=4 * cdiv(s["V"], cfg["BLOCK"]), flops=4 * s["V"]),
        tune_shapes=({"label": "decode batch", "rows": 16, "V": 32000},),
        quick_shapes=({"label": "tiny", "rows": 4, "V": 1000},),
        strict_fixed=strict_fixed,
        # argmax: max/min are exact and order-free, so BLOCK never changes the index
        bit_neutral=frozenset({"BLOCK"}) if op == "greedy" else frozenset(),
    )


ARGMAX = _spec("greedy", {})
SOFTMAX = _spec("log_softmax", {"BLOCK": STRICT_BLOCK})   # softmax and log_softmax share the spec
SPECS = (ARGMAX, SOFTMAX)

__all__ = ["greedy", "softmax", "log_softmax", "greedy_ref", "softmax_ref", "argmax_kernel", "softmax_kernel",
           "STRICT_BLOCK", "SPECS"]
