"""The LM footprint of a library op's config, from the renderer itself.

The autotuner and the cost model ask "does this config fit?" with the very check a launch makes:
the op's spec probes it (`OpSpec.probe`: a call on tiny inputs) under `compiler.render_only`, so
each kernel it launches goes through the frontend, the passes and the kunlun renderer (which
raises LMBudgetError past the budget), and nothing is built or run. The footprint depends on the
config, dtype, head dim and policy, not on the problem size, so answers are memoised.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

from compiler import numerics, render_only, use_target
from compiler.opspec import op_spec

from ..plan.model import dma_growth
from ..plan.scratch import spill_allowed


class Profile(NamedTuple):
    """What the renderer's plans say about one config of an op (all its kernels together)."""

    lm_bytes: int          # the largest LM arena of its kernels
    vector_share: float    # of the emitted element operations, the share on the vector unit
    dma_bytes: float       # DMA bytes the plans move over what the kernels as written name
    dma_transfers: float   # the same for the number of transfers
    shared_bytes: float = 0.0      # the part of dma_bytes that staged loads move (once per team)
    shared_transfers: float = 0.0  # the same for dma_transfers
    sm_slot: int = 0               # SM bytes of one team's staged tiles (the largest of its kernels)
    scratch_slot: int = 0          # GM scratch bytes per core (the largest of its kernels; 0: fits LM)

    def dma_growth(self, team: int) -> tuple[float, float]:
        """(dma_bytes, dma_transfers) when teams of `team` programs share the staged loads."""
        keep = 1 - 1 / team
        return self.dma_bytes - self.shared_bytes * keep, self.dma_transfers - self.shared_transfers * keep


@functools.lru_cache(maxsize=4096)
def _profile(target, op: str, cfg_items: tuple, probe_items: tuple, policy: str, spill: bool) -> Profile:
    """(`spill`: TILEJIT_KUNLUN_SPILL's setting, which the plan reads: part of the cache key.)"""
    spec = op_spec(op)
    with use_target(target), numerics(policy), render_only() as seen:
        spec.probe(dict(cfg_items), dict(probe_items))
    plans = [target.plan_of(r.source) for r in seen]
    ops = sum(p.element_ops for p in plans)
    totals = [p.dma_totals() for p in plans]
    growth = dma_growth(totals)
    unshared = dma_growth([p.dma_totals(team=float("inf")) for p in plans])   # staged sites priced at 0
    return Profile(max(p.lm_bytes for p in plans), sum(p.vector_ops for p in plans) / ops if ops else 0.0,
                   *growth, growth[0] - unshared[0], growth[1] - unshared[1], max(p.sm_slot for p in plans),
                   max(p.scratch_slot for p in plans))


def lm_footprint(target, spec, config: dict, shape: dict | None, policy: str) -> int:
    """Bytes of LM tile buffers per core for `spec`'s op with `config` on a kunlun target; raises
    the renderer's LMBudgetError (with the buffer listing) when it does not fit. Of `shape`, what
    changes the kernel's tiles is read: dtype, causal and the spec's exact key dims (head_dim,
    rotary_dim)."""
    return profile(target, spec, config, shape, policy)[0]


def profile(target, spec, config: dict, shape: dict | None, policy: str) -> Profile:
    """The LM footprint, vector share and DMA growth of `spec`'s op with `config` (see Profile)."""
    shape = shape or {}
    spec = op_spec(spec) if isinstance(spec, str) else spec
    exact = [k for k, how in spec.key_dims.items() if how == "exact"]
    probe = {k: shape[k] for k in ("dtype", "causal", *exact) if k in shape}
    name = spec.name
    return _profile(target, name, tuple(sorted(config.items())), tuple(sorted(probe.items())), policy,
                    spill_allowed())
