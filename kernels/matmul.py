"""matmul: C = act(A @ B + bias), fp32/fp16/bf16 inputs, fp32 accumulation, one rounding at the store.

- any strides (transposed or sliced operands are read in place, never copied);
- 2-D [M, K] @ [K, N] and batched 3-D [B, M, K] @ [B, K, N] (either operand may be 2-D and is
  then shared by every batch); the batch is grid axis 2;
- epilogue fused before the store: bias (a length-N vector) then "relu", "gelu" (tanh
  approximation, written as x * sigmoid(2u), which equals 0.5 x (1 + tanh u)) or "silu"; or a
  gated MLP's "silu_and_mul" / "gelu_and_mul": b (and bias) hold the gate's N columns, then the
  up projection's N, and C = act(gate) * up [M, N] with both products kept in fp32 (one launch,
  no [M, 2N] intermediate; forward only);
- mixed dtypes: a, b and bias may differ (e.g. bf16 activations x fp32 weights): tiles of differing
  operands are widened to fp32 (exactly) before the dot; C is `out_dtype`, by default the inputs'
  dtype, or the promoted one (torch.promote_types) when they differ.

Numerics: one program owns a BLOCK_M x BLOCK_N tile of C and walks K in ascending BLOCK_K chunks
(no split-K); `tl.dot(a, b, acc)` adds each product to the fp32 accumulator in ascending k, so
every element of C is one ascending fused-multiply-add chain over k. The config is keyed by N and
K (`SPEC.key_dims`); M may choose only the params that cannot change a bit on the target
(`OpSpec.free_params`: the row block and dot tiles on cpu and kunlun, none on gpu), so a row of C
is bitwise the same alone or inside any batch.
"""
from __future__ import annotations

import torch

from compiler import current_target, kernel, language as tl
from compiler.numerics import current_policy
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import (FLOAT_DTYPES, OP_DTYPES, cdiv, check_device, check_out, check_tensor,
                     config_text)
from .configs import select
from .op_plans import MISS
from .torch_ops import decode_config, define, require_no_grad

ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3, "silu_and_mul": 4, "gelu_and_mul": 5}
GATED = ("silu_and_mul", "gelu_and_mul")   # b = [gate | up] ([K, 2N]): act(a @ gate + bias) * (a @ up + bias)


@kernel
def _tanh_free_gelu(x):
    # gelu(x) ~= 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); 0.5 (1 + tanh u) = sigmoid(2u)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x * tl.sigmoid(2.0 * u)


@kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
                  stride_az, stride_am, stride_ak,
                  stride_bz, stride_bk, stride_bn,
                  stride_cz, stride_cm, stride_cn, stride_bias,
                  HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, MIXED: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_z = tl.program_id(2)
    a_base = a_ptr + pid_z.to(tl.int64) * stride_az
    b_base = b_ptr + pid_z.to(tl.int64) * stride_bz
    c_base = c_ptr + pid_z.to(tl.int64) * stride_cz
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if ACTIVATION >= 4:   # gated: the up projection's columns start at N
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        k_ok = ks < K
        a = tl.load(a_base + rm[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_base + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if MIXED:   # operands of different dtypes meet in fp32 (widening is exact)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        if ACTIVATION >= 4:
            b_up = tl.load(b_base + ks[:, None] * stride_bk + (rn + N)[None, :] * stride_bn,
                           mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            if MIXED:
                b_up = b_up.to(tl.float32)
            acc_up = tl.dot(a, b_up, acc_up)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rn * stride_bias, mask=n_ok, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
        if ACTIVATION >= 4:
            acc_up = acc_up + tl.load(bias_ptr + (rn + N) * stride_bias, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    if ACTIVATION == 2 or ACTIVATION == 5:
        acc = _tanh_free_gelu(acc)
    if ACTIVATION == 3 or ACTIVATION == 4:
        acc = acc * tl.sigmoid(acc)
    if ACTIVATION >= 4:
        acc = acc * acc_up
    tl.store(c_base + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def _batch_view(t: torch.Tensor):
    """(batch, stride of batch, rows, cols, row stride, col stride) of a 2-D or 3-D operand."""
    if t.dim() == 2:
        return 1, 0, t.shape[0], t.shape[1], t.stride(0), t.stride(1)
    return t.shape[0], t.stride(0) if t.shape[0] > 1 else 0, t.shape[1], t.shape[2], t.stride(1), t.stride(2)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None,
           out: torch.Tensor | None = None, *, out_dtype: torch.dtype | None = None,
           config: dict | None = None) -> torch.Tensor:
    """act(a @ b + bias), rounded once to out_dtype (default: the inputs' dtype, promoted when a, b
    and bias differ). a: [M, K] or [B, M, K]; b: [K, N] or [B, K, N]. `out` must not overlap a, b or
    bias, nor have elements that share memory (ValueError); its dtype is the output dtype.

    Runs as the torch operator tilejit::matmul (tilejit::matmul_out with `out`): traceable by
    torch.compile / torch.export, differentiable without `out` (kernels/matmul_backward.py)."""
    op = "matmul"
    config = config_text(op, SPEC, config)   # a dict hit for a config seen before
    if out is None:
        c = TORCH_OP.replayed(a, b, bias, activation, out_dtype, config)   # a seen signature: its checks passed
        if c is not MISS:
            return c
    check_tensor(op, "a", a, dims=(2, 3))
    check_tensor(op, "b", b, dims=(2, 3))
    if bias is not None:
        check_tensor(op, "bias", bias, dims=1)
    if activation in GATED and torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a, b, bias)):
        raise TypeError(f"{op}: activation {activation!r} has no gradient; for training use matmul, then "
                        f"activation.act_and_mul or torch")
    if out is None:
        return TORCH_OP(a, b, bias, activation, out_dtype, config)
    check_tensor(op, "out", out)
    want = _out_dtype(op, a, b, bias, out_dtype)
    if out.dtype != want:
        raise TypeError(f"{op}: out has dtype {str(out.dtype).replace('torch.', '')}, but the output dtype is "
                        f"{str(want).replace('torch.', '')}; pass out_dtype={out.dtype} or a matching out")
    check_out(op, out, a=a, b=b, bias=bias)
    require_no_grad(op, a, b, bias)
    TORCH_OP.call_out(a, b, bias, activation, out_dtype, config, out)
    return out


def _out_dtype(op, a, b, bias, out_dtype):
    """out_dtype, or the inputs' dtype (promoted when they differ)."""
    if out_dtype is not None:
        if out_dtype not in OP_DTYPES:
            raise TypeError(f"{op}: out_dtype must be one of float32, float16, bfloat16, got {out_dtype}")
        return out_dtype
    dt = torch.promote_types(a.dtype, b.dtype)
    return dt if bias is None else torch.promote_types(dt, bias.dtype)


def _shapes(a, b, bias, activation, out_dtype, config):
    """The checks a call's shapes must pass, and its output: ((shape, dtype),)."""
    op = "matmul"
    check_tensor(op, "a", a, dims=(2, 3), dtypes=OP_DTYPES)
    check_tensor(op, "b", b, dims=(2, 3), dtypes=OP_DTYPES)
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: unknown activation {activation!r}; choose one of "
                         f"{', '.join(repr(k) for k in ACTIVATIONS)}")
    za, _, M, K, _, _ = _batch_view(a)
    zb, _, Kb, N, _, _ = _batch_view(b)
    if K != Kb:
        raise ValueError(f"{op}: inner dimensions differ: a is {tuple(a.shape)} (K={K}) and b is "
                         f"{tuple(b.shape)} (K={Kb})")
    if activation in GATED and N % 2:
        raise ValueError(f"{op}: activation {activation!r} needs b = [gate | up] with an even number of columns, "
                         f"got {N}")
    if za != zb and 1 not in (za, zb):
        raise ValueError(f"{op}: batch sizes differ: a has {za}, b has {zb}")
    if bias is not None:
        check_tensor(op, "bias", bias, dims=1, dtypes=OP_DTYPES)
        if bias.shape[0] != N:
            raise ValueError(f"{op}: bias has {bias.shape[0]} elements, expected N={N}")
    N = N // 2 if activation in GATED else N
    batched = a.dim() == 3 or b.dim() == 3
    return (((max(za, zb), M, N) if batched else (M, N), _out_dtype(op, a, b, bias, out_dtype)),)


def _launch(a, b, bias, activation, out_dtype, config, out):
    op = "matmul"
    check_device(op, a=a, b=b, bias=bias, out=out)
    za, sza, M, K, sam, sak = _batch_view(a)
    zb, szb, _, N, sbk, sbn = _batch_view(b)
    N = N // 2 if activation in GATED else N
    Z = max(za, zb)
    if M == 0 or N == 0 or Z == 0:
        return
    if K == 0:
        cols = out.shape[-1] * (2 if activation in GATED else 1)
        out.copy_(_epilogue(torch.zeros(*out.shape[:-1], cols, dtype=torch.float64, device=a.device), bias, activation))
        return
    _, szc, _, _, scm, scn = _batch_view(out)
    cfg = decode_config(config) or select(SPEC, None, N=N, K=K, M=M, b_row_major=sbn == 1,
                                          bf16_dot=_bf16_dot(a, b))
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    matmul_kernel[(cdiv(M, bm), cdiv(N, bn), Z)](
        a, b, out, bias, M, N, K, sza, sam, sak, szb, sbk, sbn, szc, scm, scn,
        bias.stride(0) if bias is not None else 0,
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATIONS[activation], MIXED=a.dtype != b.dtype, **cfg)


def _bf16_dot(a, b) -> str | None:
    """How a cache target runs the dot of two bf16 operands in the fast policy: "tiles" on a bf16
    matrix unit that takes K in chunks (AMX: Caps.dot_k_grain), else "pairs" (the header's bf16
    dot, k pairs through vdpbf16ps where the CPU has it); None for other dots."""
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or current_policy() != "fast":
        return None
    caps = current_target().caps
    if caps.tile_class != "cache":
        return None
    return "tiles" if caps.dot_k_grain > 1 else "pairs"


def _epilogue(c: torch.Tensor, bias, activation):
    if bias is not None:
        c = c + bias.to(c.dtype)
    if activation in GATED:
        gate, up = c.chunk(2, dim=-1)
        return _epilogue(gate, None, activation.split("_")[0]) * up
    if activation == "relu":
        c = torch.relu(c)
    elif activation == "gelu":
        c = torch.nn.functional.gelu(c, approximate="tanh")
    elif activation == "silu":
        c = torch.nn.functional.silu(c)
    return c


def matmul_ref(a, b, bias=None, activation=None, out_dtype=None):
    """Reference in fp64, rounded once to the input dtype (or `out_dtype`; torch.float64 keeps it)."""
    c = _epilogue(torch.matmul(a.double(), b.double()), bias, activation)
    return c.to(out_dtype or a.dtype)


# ---------------------------------------------------------------------------------------------
# the op spec: what the autotuner, config_for and the cost models know about matmul
# ---------------------------------------------------------------------------------------------
def _clamp(cfg: dict, dims: dict) -> dict:
    """Tiles no wider than the problem: BLOCK_N and BLOCK_K shrink to N and K (powers of two, >= 16)."""
    cfg = dict(cfg)
    cfg["BLOCK_N"] = min(cfg["BLOCK_N"], max(16, npow2(dims["N"])))
    cfg["BLOCK_K"] = min(cfg["BLOCK_K"], max(16, npow2(dims["K"])))
    return cfg


def _cache(dims: dict) -> dict:
    """A cache target's default. Decode (M <= 16) is bound by reading the weight, and how it streams
    depends on B's layout (`b_row_major`, absent = row-major, the layout the autotuner measures).
    Rows of B contiguous ([K, N], as TilejitLinear stores a weight): each program reads a strip of
    columns down K, so wide strips read long runs of each row (`_decode_columns`); B read down its
    columns (x @ w.t() of an nn.Linear [N, K] weight): 64 columns x 512 k. Larger M runs 64 x 128 x
    128 tiles, or 256 (else 128) x 256 x 64 where those still make 8 programs or more: each program
    copies its A and B tiles per k step, so a larger C tile copies each operand fewer times (on a
    2-core Zen 1 host, fp32 against torch, 128 rows: 1024^3 0.83x -> 1.01x, 512 x 4096 x 4096
    0.75x -> 0.94x, 256 x 1024 x 1024 0.88x -> 0.97x; 256 rows against 128, same runs: 1024^3 0.95x
    vs 0.94x, 2048 x 2048 x 512 0.94x vs 0.93x, 512 x 4096 x 4096 0.94x vs 0.90x; with fewer
    programs a core idles). 65 to 128 rows (a prompt's prefill) run 128 x 128 x 128 where that
    makes 8 programs (2-core Intel AVX-512 host, fp32 against torch, 128 rows, N x K, from 64 x 128
    x 128 where 128 x 256 made fewer programs: 1024 x 1024 0.79-0.83x -> 0.87-0.94x, 1024 x 2816
    0.76x -> 0.87x; where 128 x 256 x 64 ran, the same within the noise: 2816 x 1024 0.83x vs
    0.87x, 8192 x 1024 0.89-0.91x vs 0.90-0.91x). Where the dot does not chain across tiles every
    M runs CACHE_DEFAULT.
    A bf16 dot on AMX tiles (`bf16_dot` "tiles") takes its own tiles (`_amx_tiles`); one through
    vdpbf16ps ("pairs") the tiles above with K tiles of 256 where M > 16: that dot runs twice the
    fp32 fma's rate, so a C tile's trip through memory after every K tile weighs twice as much
    (K tiles of 64 -> 256, Zen 4 with AVX512-BF16, 2 cores, against torch's oneDNN: 1024^3
    0.81-0.89x -> 0.94-0.98x)."""
    m, n = dims.get("M"), dims.get("N")
    amx = dims.get("bf16_dot") == "tiles"
    if m is not None and m <= 16:
        if dims.get("b_row_major", True):
            return {**CACHE_DEFAULT, "BLOCK_N": _decode_columns(n), "BLOCK_K": 256 if amx else 32}
        return {**CACHE_DEFAULT, "BLOCK_N": 64, "BLOCK_K": 256 if amx else 512}
    if amx and m is not None and n is not None:
        return _amx_tiles(m, n)
    k_tile = {"BLOCK_K": 256} if dims.get("bf16_dot") else {}
    if m is not None and n is not None and 64 < m <= 128 and cdiv(n, 128) >= 8:
        return {**CACHE_PREFILL, **k_tile}
    if m is not None and n is not None:
        for bm in (CACHE_LARGE["BLOCK_M"], CACHE_LARGE["BLOCK_M"] // 2):
            if cdiv(m, min(bm, npow2(m))) * cdiv(n, CACHE_LARGE["BLOCK_N"]) >= 8:
                return {**CACHE_LARGE, "BLOCK_M": bm, **k_tile}
    return {**CACHE_DEFAULT, **k_tile}


def _amx_tiles(m: int, n: int) -> dict:
    """Tiles of a bf16 dot on AMX (M > 16). Each dot call loads and stores its C tiles once, so K
    tiles are 256; each program copies its A and B tiles per K tile, so the C tile is as large as
    leaves 8 programs or more (4 per core): up to 512 rows, and 512 columns, else 256, else 128,
    preferring a width that divides N (a masked edge strip fills element by element). On a 2-core
    AMX host against torch's oneDNN (AMX too), from 64 x 128 / 256 x 256 tiles: 512 x 4096 x 4096
    0.87x -> 1.05x, 2048^3 0.86x -> 1.01x, 1024^3 1.29x -> 1.46x, 128 x 1024 x 2816 0.69x -> 0.97x,
    128 x 8192 x 1024 0.91x -> 1.08x, 32 x 4096 x 4096 0.99x -> 1.05x."""
    bm = min(512, npow2(m))
    wide = [bn for bn in (512, 256) if cdiv(m, bm) * cdiv(n, bn) >= 8]
    bn = next((w for w in wide if n % w == 0), wide[0] if wide else 128)
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 256}


def _decode_columns(n: int | None) -> int:
    """A decode program's columns over a row-major B: the widest strip (up to 2048) that cuts N into
    an even number of programs, so that two threads share them evenly and each reads a long run of
    every row of B; else 128 (64 where that avoids a masked edge strip: N = 704). The run length is
    what the weight's streaming speed follows: one row against torch's F.linear on a 2-core Intel
    AMX host, geometric mean over 11 Llama-shaped weights (K, N from 256 to 14336), 128-column
    strips 0.70x -> 0.85x fp32, and 0.92x -> 1.08x bf16 through vdpbf16ps
    (TILEJIT_CPU_ARCH=cooperlake), 0.94x -> 1.00x bf16 on AMX; 16 rows 1.03x -> 1.31x fp32."""
    for bn in (2048, 1024, 512, 256):
        if n is not None and n % bn == 0 and (n // bn) % 2 == 0:
            return bn
    return 64 if n is not None and n % 128 and n % 64 == 0 else 128


CACHE_DEFAULT = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128}
CACHE_PREFILL = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}
CACHE_LARGE = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64}


def _scratch(dims: dict) -> dict:
    """A scratchpad target's default: the Kunlun cost model's cheapest candidate of the space (the
    memory plan's re-reads, SM staging and asynchronous row batches priced in; xpu2, fp32, K = 4096)
    for decode (M <= 16: row blocks of 4 make teams that share each B tile), for outputs whose
    16 x 32 blocks fill xpu2's 512 cores (16 x 32 x 16: M=64 and M=512 with N=4096), and for the
    rest (8 x 32 x 32, e.g. 128 x 1024; also the default of the key dims alone, the one a target
    without bit-neutral tiles runs). All of them fit LM as written."""
    m, n = dims.get("M"), dims.get("N")
    if m is not None and m <= 16:
        return {"BLOCK_M": 4, "BLOCK_N": 32, "BLOCK_K": 32}
    if m is not None and n is not None and cdiv(m, 16) * cdiv(n, 32) >= 512:
        return {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}
    return {"BLOCK_M": 8, "BLOCK_N": 32, "BLOCK_K": 32}


SCRATCH_MID = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32}   # fits Kunlun LM as written (no cut)


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(s["M"], s["K"], generator=g)
    b = torch.randn(s["K"], s["N"], generator=g) * s["K"] ** -0.5
    return Problem(run=lambda cfg: matmul(a, b, config=cfg), ref=lambda: matmul_ref(a, b, out_dtype=torch.float64),
                   eager=lambda: a @ b)


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    matmul(torch.empty(2 * bm, 2 * bk, dtype=dt), torch.empty(2 * bk, 2 * bn, dtype=dt), config=cfg)


def _work(cfg: dict, s: dict) -> Work:
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    steps = cdiv(s["K"], bk)
    return Work(programs=cdiv(s["M"], bm) * cdiv(s["N"], bn) * s.get("batch", 1),
                elements=steps * (bm * bk + bk * bn) + bm * bn,    # A and B tiles per k step, then C
                segments=steps * (bm + bk) + bm,                   # one per tile row
                flops=2 * bm * bn * bk * steps, axis0=cdiv(s["M"], bm))


SPEC = OpSpec(
    name="matmul",
    key_dims={"N": "align32", "K": "align32"},   # weight dims; odd sizes share the aligned size's decision
    # candidates: powers of two, as Triton requires
    space=tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
                for bm in (16, 32, 64, 128, 256) for bn in (16, 32, 64, 128, 256) for bk in (16, 32, 64, 128, 256))
    + tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 256}   # the larger C tiles of _amx_tiles
            for bm in (32, 64, 128, 256, 512) for bn in (128, 256, 512) if 512 in (bm, bn)),
    spaces={"scratchpad": tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
                                for bm in (4, 8, 16, 32, 64) for bn in (16, 32, 64) for bk in (8, 16, 32)),
            # tiles with warps and pipeline stages (benchmarks/gpu_configs.py times them on a GPU)
            "simt": tuple({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": st}
                          for bm, bn, bk, w, st in ((64, 128, 32, 4, 3), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3),
                                                    (128, 256, 64, 8, 3), (64, 64, 64, 4, 4), (64, 128, 64, 4, 4)))},
    defaults={
        "cache": _cache,
        "scratchpad": _scratch,
        "simt": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    },
    clamp=_clamp,
    dims_of=lambda s: {"N": s["N"], "K": s["K"], "M": s["M"]},
    problem=_problem,
    describe=lambda s: f"{s['M']}x{s['N']}x{s['K']}",
    probe=_probe,
    work=_work,
    tune_shapes=({"label": "decode qkv/o-proj", "M": 16, "N": 4096, "K": 4096},
                 {"label": "prefill kv-proj (8 kv heads)", "M": 128, "N": 1024, "K": 4096},
                 {"label": "small", "M": 64, "N": 256, "K": 256}),
    quick_shapes=({"label": "tiny", "M": 16, "N": 64, "K": 32},),
    # where a target declares BLOCK_M bit-neutral (cpu: every element of C is one ascending-k fma
    # chain whatever BLOCK_M is), a small M runs small row blocks
    follows={"BLOCK_M": "M"},
    # each element of C is one fma chain over k: where the target's dot continues it across tiles,
    # BLOCK_N and BLOCK_K may follow M too (the decode tiles of _cache and _scratch)
    dot_tiles=frozenset({"BLOCK_N", "BLOCK_K"}),
    dot_k="BLOCK_K",
)
SPECS = (SPEC,)

# the torch operators tilejit::matmul / tilejit::matmul_out (kernels/torch_ops.py)
TORCH_OP = define("matmul", "Tensor a, Tensor b, Tensor? bias, str? activation, ScalarType? out_dtype, str? config",
                  ("out",), shapes=_shapes, launch=_launch,
                  reference=lambda a, b, bias, act, out_dtype, cfg: (matmul_ref(a, b, bias, act, torch.float64),))

__all__ = ["matmul", "matmul_ref", "matmul_kernel", "SPEC", "SPECS", "CACHE_DEFAULT", "SCRATCH_MID", "TORCH_OP", "ACTIVATIONS", "GATED", "FLOAT_DTYPES"]
