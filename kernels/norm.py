"""Row norms: layer_norm, rms_norm and the fused add_rms_norm (residual add + rms_norm).

The last dimension is normalised; leading dimensions are flattened into rows. One program per
row (on a cache target, a one-chunk fp16/bf16 layer_norm gives a program up to 16 rows, so its
weight and bias are widened once: ROWS, the same operations per row); a row longer than BLOCK
is walked in ascending BLOCK-wide chunks: the first pass accumulates into a BLOCK-wide fp32 tile
(element j of the tile sums columns j, j+BLOCK, j+2*BLOCK, ... in ascending order) and one
`tl.sum` folds the tile at the end. BLOCK is chosen from the row length alone, so a row's result
never depends on how many rows are normalised with it.

layer_norm uses two passes over the row (mean, then the sum of squared deviations), which avoids
the cancellation of E[x^2] - E[x]^2; a row that fits one BLOCK is read once for both and for the
output (ONE_CHUNK: the same operations, so the same bits). Inputs fp32/fp16/bf16; statistics and arithmetic in fp32;
the output is rounded once to the input dtype.
"""
from __future__ import annotations

import math

import torch

from compiler import current_target, kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import OP_DTYPES, cdiv, check_device, check_same_dtype, check_tensor, config_text
from .configs import shared
from .op_plans import MISS
from .torch_ops import decode_config, define

# strict: BLOCK fixes the order of the row sums, so it is one value on every target (the largest
# that fits Kunlun's LM), and strict outputs of all targets are bitwise equal (docs/numerics.md)
STRICT_BLOCK = 128


@kernel
def _chunk_f32(ptr, stride, cols, mask):
    """Elements `cols` of a row (0 where masked off), widened to fp32: every pass of a norm reads so."""
    return tl.load(ptr + cols * stride, mask=mask, other=0.0).to(tl.float32)


@kernel
def _vector_f32(ptr, cols, mask, HAS: tl.constexpr):
    """Elements `cols` of the weight or bias widened to fp32 (0.0, never read, when the op has none)."""
    v = 0.0
    if HAS:
        v = _chunk_f32(ptr, 1, cols, mask)
    return v


@kernel
def _normalised(x, mean, rstd, w, b, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    y = (x - mean) * rstd
    if HAS_W:
        y = y * w
    if HAS_B:
        y = y + b
    return y


@kernel
def _layer_norm_row(x_row, y_row, stride_xn, N, eps, w, b, cols, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    EVEN: tl.constexpr, BLOCK: tl.constexpr):
    """A row of N <= BLOCK, read once and kept: the same operations as the chunk loops of
    layer_norm_kernel when they run one iteration, so the bits do not change: `zeros + x` turns a
    -0.0 into +0.0, while `zeros + d * d` is d * d itself (a square is never -0.0), so it is left out.
    EVEN: N == BLOCK, so no lane is masked off and the deviations need no tl.where (with an all-true
    mask it is the identity: the same bits, one select less per element)."""
    _layer_norm_tile(_chunk_f32(x_row, stride_xn, cols, mask), y_row, N, eps, w, b, cols, mask, HAS_W, HAS_B, EVEN,
                     BLOCK)


@kernel
def _layer_norm_tile(x, y_row, N, eps, w, b, cols, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     EVEN: tl.constexpr, BLOCK: tl.constexpr):
    """_layer_norm_row of a row already in a tile (fp32): add_layer_norm's x + r."""
    mean = tl.sum(tl.zeros([BLOCK], dtype=tl.float32) + x, axis=0) / N
    d = x - mean
    if not EVEN:
        d = tl.where(mask, d, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    y = _normalised(x, mean, rstd, w, b, HAS_W, HAS_B)
    tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=mask)


@kernel
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_x, stride_xn, stride_y, eps,
                      HAS_W: tl.constexpr, HAS_B: tl.constexpr, ONE_CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                      EVEN: tl.constexpr = False, ROWS: tl.constexpr = 1, n_rows=1):
    """ONE_CHUNK (N <= BLOCK): _layer_norm_row. ROWS > 1 (with ONE_CHUNK): program p normalises rows
    p * ROWS .. min((p + 1) * ROWS, n_rows) - 1 one after the other, with the weight and bias widened
    to fp32 once for all of them; each row's operations, and so its bits, are those of ROWS = 1."""
    row = tl.program_id(0).to(tl.int64)
    if ONE_CHUNK:
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        w = _vector_f32(w_ptr, cols, mask, HAS_W)
        b = _vector_f32(b_ptr, cols, mask, HAS_B)
        if ROWS == 1:
            _layer_norm_row(x_ptr + row * stride_x, y_ptr + row * stride_y, stride_xn, N, eps, w, b, cols, mask,
                            HAS_W, HAS_B, EVEN, BLOCK)
        else:
            first = row * ROWS
            for r in range(first, tl.minimum(first + ROWS, n_rows)):
                _layer_norm_row(x_ptr + r * stride_x, y_ptr + r * stride_y, stride_xn, N, eps, w, b, cols, mask,
                                HAS_W, HAS_B, EVEN, BLOCK)
        return
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
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
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        y = _normalised(_chunk_f32(x_row, stride_xn, cols, mask), mean, rstd, _vector_f32(w_ptr, cols, mask, HAS_W),
                        _vector_f32(b_ptr, cols, mask, HAS_B), HAS_W, HAS_B)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@kernel
def _residual_sum(x_row, stride_xn, r_row, stride_rn, cols, mask, dtype: tl.constexpr):
    """s = x + r rounded to the input dtype (what is stored to res), returned in fp32."""
    return (_chunk_f32(x_row, stride_xn, cols, mask) + _chunk_f32(r_row, stride_rn, cols, mask)).to(dtype)


@kernel
def rms_norm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, res_ptr, N, stride_x, stride_xn, stride_r, stride_rn,
                    stride_y, eps, HAS_R: tl.constexpr, HAS_W: tl.constexpr, BLOCK: tl.constexpr):
    """y = s * rsqrt(mean(s^2) + eps) * w with s = x, or s = round(x + r) (stored to res) when r is given."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        if HAS_R:
            s = _residual_sum(x_row, stride_xn, r_ptr + row * stride_r, stride_rn, cols, mask,
                              x_ptr.dtype.element_ty)
            tl.store(res_ptr + row * stride_y + cols, s, mask=mask)
            s = s.to(tl.float32)
        else:
            s = _chunk_f32(x_row, stride_xn, cols, mask)
        acc += s * s
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        if HAS_R:
            # recomputed rather than re-read from res: no read-after-write through memory
            s = _residual_sum(x_row, stride_xn, r_ptr + row * stride_r, stride_rn, cols, mask,
                              x_ptr.dtype.element_ty).to(tl.float32)
        else:
            s = _chunk_f32(x_row, stride_xn, cols, mask)
        y = s * rstd
        if HAS_W:
            y = y * _chunk_f32(w_ptr, 1, cols, mask)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _rows(op, name, x):
    """(x as a 2-D [rows, N] view (a copy only when the leading dims cannot be flattened in place),
    rows, N). Rows of length 0, and no rows, are fine: the result is empty."""
    check_tensor(op, name, x, dtypes=OP_DTYPES)
    shape = x.shape
    if len(shape) == 2:
        return x, shape[0], shape[1]
    if not shape:
        raise ValueError(f"{op}: argument '{name}' must have at least 1 dimension, got a scalar")
    N, rows = shape[-1], math.prod(shape[:-1])
    return x.reshape(rows, N), rows, N


def _check_vec(op, name, t, x, N):
    if t is None:
        return None
    check_tensor(op, name, t, dims=1, dtypes=OP_DTYPES)
    if t.dtype != x.dtype:
        check_same_dtype(op, "x", x, **{name: t})
    if t.shape[0] != N:
        raise ValueError(f"{op}: {name} has {t.shape[0]} elements, expected {N} (the last dim of x)")
    return t if t.is_contiguous() else t.contiguous()


def _check_eps(op, eps):
    if type(eps) is float and eps >= 0:
        return eps
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a non-negative float, got {eps!r}")
    return float(eps)


def _wrapper_checks(op, eps, **tensors):
    """What the torch operator's dispatcher cannot report by name: tensor types and dtypes (float64
    only through the operators' reference path), and eps."""
    for name, t in tensors.items():
        if t is not None or name == "x":
            check_tensor(op, name, t)
    return _check_eps(op, eps)


def _config(spec, config, N) -> dict:
    return decode_config(config) or shared(spec, None, {"N": N})


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, *, config: dict | None = None) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim (weight/bias optional).
    Runs as the torch operator tilejit::layer_norm (differentiable: kernels/norm_backward.py)."""
    config = config_text("layer_norm", LAYER_NORM, config)   # a dict hit for a config seen before
    out = LAYER_NORM_OP.replayed(x, weight, bias, eps, config)   # a seen signature: its checks passed
    if out is not MISS:
        return out
    eps = _wrapper_checks("layer_norm", eps, x=x, weight=weight, bias=bias)
    return LAYER_NORM_OP(x, weight, bias, eps, config)


def _layer_norm_shapes(x, weight, bias, eps, config):
    op = "layer_norm"
    _, _, N = _rows(op, "x", x)
    _check_vec(op, "weight", weight, x, N), _check_vec(op, "bias", bias, x, N)
    _check_eps(op, eps)
    return ((x.shape, x.dtype),)


def _layer_norm_launch(x, weight, bias, eps, config, y):
    op = "layer_norm"
    x2, rows, N = _rows(op, "x", x)
    weight, bias = _check_vec(op, "weight", weight, x, N), _check_vec(op, "bias", bias, x, N)
    check_device(op, x=x, weight=weight, bias=bias, y=y)
    if rows == 0 or N == 0:
        return
    y2 = y.view(rows, N)
    cfg = _config(LAYER_NORM, config, N)
    sx = x2.stride()
    one_chunk = N <= cfg["BLOCK"]
    per = _rows_per_program(rows) if one_chunk and x.dtype in (torch.float16, torch.bfloat16) \
        and current_target().caps.tile_class == "cache" else 1
    several = {"ROWS": per, "n_rows": rows} if per > 1 else {}
    layer_norm_kernel[(cdiv(rows, per),)](x2, weight, bias, y2, N, sx[0], sx[1], y2.stride(0), eps,
                                          HAS_W=weight is not None, HAS_B=bias is not None, ONE_CHUNK=one_chunk,
                                          EVEN=N == cfg["BLOCK"], **several, **cfg)


def _rows_per_program(rows: int) -> int:
    """Rows one program of a one-chunk fp16/bf16 layer_norm normalises on a cache target (ROWS): up
    to 16, so the weight and bias are widened once for all of them (bf16 [32, 4096] on 2 AVX2 threads,
    the kernel alone: 74 -> 67 us), while the threads keep equal shares (a program count that is a
    multiple of the thread count, or at least 8 programs a thread). No bit depends on it."""
    threads = max(torch.get_num_threads(), 1)
    for per in (16, 8, 4, 2):
        programs = cdiv(rows, per)
        if programs >= threads and (programs % threads == 0 or programs >= 8 * threads):
            return per
    return 1


def _check_residual(op, x, residual):
    check_tensor(op, "residual", residual, dtypes=OP_DTYPES)
    check_same_dtype(op, "x", x, residual=residual)
    if residual.shape != x.shape:
        raise ValueError(f"{op}: residual has shape {tuple(residual.shape)}, expected x's {tuple(x.shape)}")


def _rms_shapes(op, x, residual, weight, eps):
    _, _, N = _rows(op, "x", x)
    if residual is not None:
        _check_residual(op, x, residual)
    _check_vec(op, "weight", weight, x, N)
    _check_eps(op, eps)
    return ((x.shape, x.dtype),) * (1 if residual is None else 2)


def _rms_launch(op, x, residual, weight, eps, config, y, res):
    x2, rows, N = _rows(op, "x", x)
    r2 = residual.reshape(rows, N) if residual is not None else None
    weight = _check_vec(op, "weight", weight, x, N)
    check_device(op, x=x, residual=residual, weight=weight, y=y, res=res)
    if rows and N:
        y2 = y.view(rows, N)
        cfg = _config(RMS_NORM if residual is None else ADD_RMS_NORM, config, N)
        sx = x2.stride()
        sr = r2.stride() if r2 is not None else (0, 0)
        rms_norm_kernel[(rows,)](
            x2, r2, weight, y2, res.view(rows, N) if res is not None else None, N, sx[0], sx[1], sr[0], sr[1],
            y2.stride(0), eps,
            HAS_R=r2 is not None, HAS_W=weight is not None, **cfg)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *,
             config: dict | None = None) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim (weight optional).
    Runs as the torch operator tilejit::rms_norm (differentiable: kernels/norm_backward.py)."""
    config = config_text("rms_norm", RMS_NORM, config)
    out = RMS_NORM_OP.replayed(x, weight, eps, config)
    if out is not MISS:
        return out
    eps = _wrapper_checks("rms_norm", eps, x=x, weight=weight)
    return RMS_NORM_OP(x, weight, eps, config)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6,
                 *, config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual); the sum is rounded to x.dtype before it is normalised.
    Runs as the torch operator tilejit::add_rms_norm (differentiable: kernels/norm_backward.py)."""
    config = config_text("add_rms_norm", ADD_RMS_NORM, config)
    out = ADD_RMS_NORM_OP.replayed(x, residual, weight, eps, config)
    if out is not MISS:
        return out
    if residual is None:
        raise TypeError("add_rms_norm: argument 'residual' must be a torch.Tensor, got None")
    eps = _wrapper_checks("add_rms_norm", eps, x=x, residual=residual, weight=weight)
    return ADD_RMS_NORM_OP(x, residual, weight, eps, config)


# ---------------------------------------------------------------------------------------------
# references (fp64 inside, one rounding to the input dtype)
# ---------------------------------------------------------------------------------------------
def layer_norm_ref(x, weight=None, bias=None, eps=1e-5, out_dtype=None):
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    var = ((xd - mean) ** 2).mean(-1, keepdim=True)
    y = (xd - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y.to(out_dtype or x.dtype)


def rms_norm_ref(x, weight=None, eps=1e-6, out_dtype=None):
    xd = x.double()
    y = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.double()
    return y.to(out_dtype or x.dtype)


def add_rms_norm_ref(x, residual, weight=None, eps=1e-6, out_dtype=None):
    s = (x.double() + residual.double()).to(x.dtype)
    return rms_norm_ref(s, weight, eps, out_dtype), s


# ---------------------------------------------------------------------------------------------
# the op specs: one per norm, sharing the config space, defaults and clamp
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    """A chunk no wider than the row: BLOCK shrinks to N (a power of two, >= 16)."""
    return {**cfg, "BLOCK": min(cfg["BLOCK"], max(16, npow2(dims["N"])))}


def _rms_eager(x, r, w, eps):
    h = x if r is None else x + r
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w


def _problem(op: str):
    def build(s: dict) -> Problem:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(s["rows"], s["N"], generator=g)
        w = torch.randn(s["N"], generator=g)
        if op == "layer_norm":
            b = torch.randn(s["N"], generator=g)
            return Problem(run=lambda cfg: layer_norm(x, w, b, 1e-5, config=cfg),
                           ref=lambda: layer_norm_ref(x, w, b, 1e-5, out_dtype=torch.float64),
                           eager=lambda: torch.nn.functional.layer_norm(x, (s["N"],), w, b, 1e-5))
        if op == "rms_norm":
            return Problem(run=lambda cfg: rms_norm(x, w, 1e-6, config=cfg),
                           ref=lambda: rms_norm_ref(x, w, 1e-6, out_dtype=torch.float64),
                           eager=lambda: _rms_eager(x, None, w, 1e-6))
        r = torch.randn(s["rows"], s["N"], generator=g)
        return Problem(run=lambda cfg: add_rms_norm(x, r, w, 1e-6, config=cfg)[0],
                       ref=lambda: add_rms_norm_ref(x, r, w, 1e-6, out_dtype=torch.float64)[0],
                       eager=lambda: _rms_eager(x, r, w, 1e-6))
    return build


def _probe(op: str):
    def probe(cfg: dict, shape: dict) -> None:
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
        x, w = torch.empty(2, 2 * cfg["BLOCK"] + 1, dtype=dt), torch.empty(2 * cfg["BLOCK"] + 1, dtype=dt)
        if op == "layer_norm":
            layer_norm(x, w, w, config=cfg)
        elif op == "rms_norm":
            rms_norm(x, w, config=cfg)
        else:
            add_rms_norm(x, x, w, config=cfg)
    return probe


def _work(op: str):
    passes = {"layer_norm": 3, "rms_norm": 2, "add_rms_norm": 3}[op]

    def work(cfg: dict, s: dict) -> Work:
        n = s["N"]
        elements = passes * n + n + (n if op != "rms_norm" else 0)   # row reads, output, weight/bias/residual
        return Work(programs=s["rows"], elements=elements, segments=cdiv(elements, cfg["BLOCK"]),
                    flops=8 * passes * n, axis0=s["rows"])
    return work


def _one_chunk_rows(dims: dict) -> dict:
    """layer_norm's default on a cache target: a row of a power-of-two length up to 8192 in one chunk
    (read once, ONE_CHUNK: 2-30% faster than 1024-wide chunks at 2048, 4096 and 8192 columns, fp32
    and bf16, 32 and 512 rows, 2 AVX2 cores); other lengths walk 1024-wide chunks (a partial last chunk
    takes the masked path, slower as one chunk)."""
    n = dims.get("N") or 0
    return {"BLOCK": n if 1024 < n <= 8192 and n & (n - 1) == 0 else 1024}


def _spec(op: str, tune_shapes, cache_default=None) -> OpSpec:
    return OpSpec(
        name=op,
        key_dims={"N": "exact"},   # the hidden size: one per model; whether BLOCK divides it matters
        space=tuple({"BLOCK": b} for b in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)),
        spaces={"scratchpad": tuple({"BLOCK": b} for b in (32, 64, 128, 256))},
        # the largest chunk per tile class; rows shorter than it use the next power of two of their length
        defaults={"cache": cache_default or {"BLOCK": 1024}, "scratchpad": {"BLOCK": 128}, "simt": {"BLOCK": 4096}},
        clamp=_clamp,
        dims_of=lambda s: {"N": s["N"]},
        problem=_problem(op),
        describe=lambda s: f"[{s['rows']}, {s['N']}]",
        probe=_probe(op),
        work=_work(op),
        tune_shapes=tune_shapes,
        quick_shapes=({"label": "tiny", "rows": 4, "N": 64},),
        strict_fixed={"BLOCK": STRICT_BLOCK},
    )


LAYER_NORM = _spec("layer_norm", ({"label": "prefill", "rows": 512, "N": 4096},), _one_chunk_rows)
RMS_NORM = _spec("rms_norm", ({"label": "prefill", "rows": 512, "N": 4096}, {"label": "small", "rows": 64, "N": 1024}))
ADD_RMS_NORM = _spec("add_rms_norm", ({"label": "decode", "rows": 16, "N": 4096},))
SPECS = (LAYER_NORM, RMS_NORM, ADD_RMS_NORM)

# the torch operators tilejit::layer_norm / rms_norm / add_rms_norm and their _out forms (kernels/torch_ops.py)
LAYER_NORM_OP = define(
    "layer_norm", "Tensor x, Tensor? weight, Tensor? bias, float eps, str? config", ("y",),
    shapes=_layer_norm_shapes, launch=_layer_norm_launch,
    reference=lambda x, w, b, eps, cfg: (layer_norm_ref(x, w, b, eps, torch.float64),))
RMS_NORM_OP = define(
    "rms_norm", "Tensor x, Tensor? weight, float eps, str? config", ("y",),
    shapes=lambda x, w, eps, cfg: _rms_shapes("rms_norm", x, None, w, eps),
    launch=lambda x, w, eps, cfg, y: _rms_launch("rms_norm", x, None, w, eps, cfg, y, None),
    reference=lambda x, w, eps, cfg: (rms_norm_ref(x, w, eps, torch.float64),))
ADD_RMS_NORM_OP = define(
    "add_rms_norm", "Tensor x, Tensor residual, Tensor? weight, float eps, str? config", ("y", "res"),
    shapes=lambda x, r, w, eps, cfg: _rms_shapes("add_rms_norm", x, r, w, eps),
    launch=lambda x, r, w, eps, cfg, y, res: _rms_launch("add_rms_norm", x, r, w, eps, cfg, y, res),
    reference=lambda x, r, w, eps, cfg: add_rms_norm_ref(x, r, w, eps, torch.float64))

__all__ = ["layer_norm", "rms_norm", "add_rms_norm", "layer_norm_ref", "rms_norm_ref", "add_rms_norm_ref",
           "layer_norm_kernel", "rms_norm_kernel", "STRICT_BLOCK", "SPECS", "LAYER_NORM_OP", "RMS_NORM_OP",
           "ADD_RMS_NORM_OP"]
