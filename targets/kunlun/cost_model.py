"""An estimate, labelled as such, of a library kernel's time on a Kunlun arch, for the autotuner to
rank configs where no device is present: DMA bytes over memory bandwidth, per-transfer DMA setup,
SIMD work over the cores' peak, launch overhead. It counts the transfers the renderer emits: one
GM2LM/LM2GM per contiguous segment of a tile (attention's K^T tile: one per column, contiguous
along head_dim). Whether a config fits LM is not estimated: the
renderer's own check answers it (lm_probe.py).

Assumed figures (not from a vendor document; change them here): the SIMD clock, the per-transfer
DMA setup, the launch overhead, and, for xpu3, the memory bandwidth (the reference marks it unknown,
so xpu2's 512 GB/s stands in).
"""
from __future__ import annotations

from .arch import Arch
from .lm_probe import lm_footprint

ASSUMED_CLOCK_HZ = 1.0e9          # SIMD issue rate per core (assumed)
ASSUMED_DMA_SETUP_S = 50e-9       # fixed cost of one GM2LM/LM2GM (assumed)
ASSUMED_LAUNCH_S = 10e-6          # one kernel launch (assumed)
FALLBACK_BANDWIDTH = 512e9        # xpu2's figure, used where an arch's bandwidth is unknown
F32 = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class CostEstimateError(ValueError):
    """The config cannot run on the arch (its LM tiles do not fit): the autotuner rejects it."""


def estimate(target, op: str, config: dict, shape: dict, policy: str = "fast") -> float:
    """Estimated seconds for one call of `op` with `config` on `shape` (a shapes-file entry) on a
    kunlun target; raises the renderer's LMBudgetError when the config does not fit."""
    lm_footprint(target, op, config, shape, policy)
    return estimate_time(target.arch, op, config, shape)


def estimate_time(arch: Arch, op: str, config: dict, shape: dict) -> float:
    """The time part of `estimate`, for a config known to fit."""
    bw = arch.mem_bandwidth or FALLBACK_BANDWIDTH
    core_flops = arch.fp32_lanes * 2 * ASSUMED_CLOCK_HZ
    if op == "matmul":
        M, N, K = shape["M"], shape["N"], shape["K"]
        bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
        programs = _cdiv(M, bm) * _cdiv(N, bn) * shape.get("batch", 1)
        steps = _cdiv(K, bk)
        elems = steps * (bm * bk + bk * bn) + bm * bn          # moved per program
        transfers = steps * (bm + bk) + bm                      # one per tile row
        flops = 2 * bm * bn * bk * steps
    elif op in ("layer_norm", "rms_norm", "add_rms_norm"):
        rows, n, block = shape["rows"], shape["N"], config["BLOCK"]
        passes = {"layer_norm": 3, "rms_norm": 2, "add_rms_norm": 3}[op]
        programs = rows
        elems = passes * n + n + (n if op != "rms_norm" else 0)   # row reads, output, weight/bias/residual
        transfers = _cdiv(elems, block)                            # one per chunk
        flops = 8 * passes * n
    elif op == "attention":
        b, h, sq, sk, d = shape["batch"], shape["heads"], shape["seq_q"], shape["seq_k"], shape["head_dim"]
        bm, bn = config["BLOCK_M"], config["BLOCK_N"]
        bd = config.get("BLOCK_D", d)
        dk, do = min(config.get("BLOCK_DK", bd), bd), min(config.get("BLOCK_DO", bd), bd)
        programs = b * h * _cdiv(sq, bm) * (bd // do)          # one per block of output columns
        blocks = _cdiv(sk, bn)
        q_reads = bm * bd * (1 if dk == bd else blocks)          # q is re-read per key block when chunked
        elems = q_reads + blocks * (bn * bd + bn * do) + bm * do
        flops = blocks * (2 * bm * bn * bd + 2 * bm * bn * do)  # every column program recomputes q.k^T
        # one transfer per row segment: q rows per chunk, K^T columns (contiguous along d), V rows, out rows
        transfers = (bm * (bd // dk)) * (1 if dk == bd else blocks) + blocks * (bn * (bd // dk) + bn) + bm
    else:
        raise CostEstimateError(f"no cost model for op {op!r}")
    waves = _cdiv(programs, arch.cores)
    per_program = flops / core_flops + transfers * ASSUMED_DMA_SETUP_S
    memory = programs * elems * F32 / bw
    return ASSUMED_LAUNCH_S + max(memory, waves * per_program)
