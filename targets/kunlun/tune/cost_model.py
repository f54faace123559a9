"""An estimate, labelled as such, of a library op's time on a Kunlun arch, for the autotuner to
rank configs where no device is present. The op says what one call does (`OpSpec.work`: programs,
and per program the elements moved, the contiguous segments they come in, the flops); this model
prices it: DMA bytes over memory bandwidth, a fixed setup per segment (one GM2LM/LM2GM each, as
the renderer emits them), both scaled by what the memory plan adds (a strip-mined pass re-reads a
tile once per chunk of another axis: `Profile.dma_bytes`), the flops at the vector unit's rate for
the share of the emitted code that is vectorised and at one lane for the rest (the renderer counts
both), launch overhead. Loads staged in SM (plan/staging.py) move their bytes once per team of
programs along grid axis 0 (`Work.axis0`); the SM copies and the cluster barriers are not priced.
Whether a config fits LM is not estimated: the renderer's own check answers it (footprint.py).

Assumed figures (not from a vendor document; change them here): the SIMD clock, the per-transfer
DMA setup, the launch overhead, and, for xpu3, the memory bandwidth (no public source gives it,
so xpu2's 512 GB/s stands in).
"""
from __future__ import annotations

from compiler import cdiv
from compiler.opspec import Work

from ..arch import Arch
from ..plan.staging import team_size, votes_bytes
from .footprint import profile

ASSUMED_CLOCK_HZ = 1.0e9          # SIMD issue rate per core (assumed)
ASSUMED_DMA_SETUP_S = 50e-9       # fixed cost of one GM2LM/LM2GM (assumed)
ASSUMED_LAUNCH_S = 10e-6          # one kernel launch (assumed)
FALLBACK_BANDWIDTH = 512e9        # xpu2's figure, used where an arch's bandwidth is unknown
F32 = 4


def estimate(target, spec, config: dict, shape: dict, policy: str = "fast") -> float:
    """Estimated seconds for one call of `spec`'s op with `config` on `shape` (a shapes-file entry)
    on a kunlun target; raises the renderer's LMBudgetError when the config does not fit."""
    launched = spec.launched(config, spec.dims_of(shape), policy)   # what runs on this shape (clamped)
    p = profile(target, spec, launched, shape, policy)
    work, arch = spec.work(launched, shape), target.arch
    team = team_size(work.axis0, arch.cores_per_cluster, p.sm_slot,
                     arch.sm_bytes_per_cluster - votes_bytes(arch.cores_per_cluster))
    return estimate_time(arch, work, p.vector_share, *p.dma_growth(team))


def estimate_time(arch: Arch, work: Work, vector_share: float = 1.0, dma_bytes: float = 1.0,
                  dma_transfers: float = 1.0) -> float:
    """The time part of `estimate`, for a config known to fit; `vector_share` of the work runs on
    the vector unit, the rest one lane at a time; the memory plan moves `dma_bytes` times the bytes
    and `dma_transfers` times the transfers the op's work names (its re-reads after strip-mining)."""
    bw = arch.mem_bandwidth or FALLBACK_BANDWIDTH
    core_flops = arch.fp32_lanes * 2 * ASSUMED_CLOCK_HZ / (vector_share + (1 - vector_share) * arch.fp32_lanes)
    waves = cdiv(work.programs, arch.cores)
    per_program = work.flops / core_flops + work.segments * dma_transfers * ASSUMED_DMA_SETUP_S
    memory = work.programs * work.elements * dma_bytes * F32 / bw
    return ASSUMED_LAUNCH_S + max(memory, waves * per_program)
