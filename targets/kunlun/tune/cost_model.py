"""An estimate, labelled as such, of a library op's time on a Kunlun arch, for the autotuner to
rank configs where no device is present. The op says what one call does (`OpSpec.work`: programs,
and per program the elements moved, the contiguous segments they come in, the flops); this model
prices it: DMA bytes over memory bandwidth, a fixed setup per segment (one GM2LM/LM2GM each, as
the renderer emits them), both scaled by what the memory plan adds (a strip-mined pass re-reads a
tile once per chunk of another axis: `Profile.dma_bytes`), the flops at the vector unit's rate for
the share of the emitted code that is vectorised and at one lane for the rest (the renderer counts
both), launch overhead. Loads staged in SM (plan/staging.py) move their bytes once per team of
programs along grid axis 0 (`Work.axis0`); the SM copies and the cluster barriers are not priced.
Whether a config fits LM is not estimated: the renderer's own check answers it (footprint.py), and
a config whose plan keeps tiles in GM scratch is refused here like one over LM, so the autotuner
and the library defaults keep to configs that fit.

Assumed figures (not from a vendor document; change them here): the SIMD clock, the per-transfer
DMA setup, the launch overhead, and, for xpu3, the memory bandwidth (no public source gives it,
so xpu2's 512 GB/s stands in).
"""
from __future__ import annotations

from compiler import cdiv
from compiler.opspec import Work

from ..arch import Arch
from ..plan.explain import LMBudgetError
from ..plan.model import NOMINAL_TRIPS
from ..plan.staging import team_size, votes_bytes
from .footprint import profile

ASSUMED_CLOCK_HZ = 1.0e9          # SIMD issue rate per core (assumed)
ASSUMED_DMA_SETUP_S = 50e-9       # fixed cost of one GM2LM/LM2GM (assumed)
ASSUMED_LAUNCH_S = 10e-6          # one kernel launch (assumed)
FALLBACK_BANDWIDTH = 512e9        # xpu2's figure, used where an arch's bandwidth is unknown
F32 = 4


def estimate(target, spec, config: dict, shape: dict, policy: str) -> float:
    """Estimated seconds for one call of `spec`'s op with `config` on `shape` (a shapes-file entry)
    on a kunlun target; raises the renderer's LMBudgetError when the config does not fit."""
    launched = spec.launched(config, spec.dims_of(shape), policy)   # what runs on this shape (clamped)
    p = profile(target, spec, launched, shape, policy)
    if p.scratch_slot:   # the tuner ranks the configs that fit LM: one that spills is rejected as over it
        raise LMBudgetError(f"op '{spec.name}' with {launched} keeps {p.scratch_slot} bytes of tiles per core in "
                            "GM scratch (the memory plan's lowest tier); configs that fit LM are preferred")
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


def tier_costs(plan, arch: Arch) -> dict[str, float]:
    """Estimated seconds one program of a rendered `plan` spends per tier, run-time loops at the
    plan's nominal trips: "LM" its compute (the vector share at the SIMD rate, the rest at one
    lane), "GM" the DMA of the kernel's tensors, "GM scratch" the DMA of the plan's lowest tier
    (bytes over a core's share of the bandwidth, plus a setup per transfer the core waits for)."""
    bw = (arch.mem_bandwidth or FALLBACK_BANDWIDTH) / arch.cores
    out = {"LM": 0.0, "GM": 0.0, "GM scratch": 0.0}
    share = plan.vector_share
    ops = plan.element_ops
    out["LM"] = ops * share / (arch.fp32_lanes * ASSUMED_CLOCK_HZ) + ops * (1 - share) / ASSUMED_CLOCK_HZ
    for d in plan.dma:
        t = d.bytes_per_run(NOMINAL_TRIPS) / bw + d.waits_per_run(NOMINAL_TRIPS) * ASSUMED_DMA_SETUP_S
        out["GM scratch" if d.scratch else "GM"] += t
    return out
