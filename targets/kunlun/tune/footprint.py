"""The LM footprint of a library op's config, from the renderer itself.

The autotuner and the cost model ask "does this config fit?" with the very check a launch makes:
the op's spec probes it (`OpSpec.probe`: a call on tiny inputs) under `compiler.render_only`, so
each kernel it launches goes through the frontend, the passes and the kunlun renderer (which
raises LMBudgetError past the budget), and nothing is built or run. The footprint depends on the
config, dtype, head dim and policy, not on the problem size, so answers are memoised.
"""
from __future__ import annotations

import functools

from compiler import numerics, render_only, use_target
from compiler.opspec import op_spec


@functools.lru_cache(maxsize=4096)
def _footprint(target, op: str, cfg_items: tuple, probe_items: tuple, policy: str) -> int:
    spec = op_spec(op)
    with use_target(target), numerics(policy), render_only() as seen:
        spec.probe(dict(cfg_items), dict(probe_items))
    return max(target.footprint(r.source) for r in seen)


def lm_footprint(target, spec, config: dict, shape: dict | None = None, policy: str = "fast") -> int:
    """Bytes of LM tile buffers per core for `spec`'s op with `config` on a kunlun target; raises
    the renderer's LMBudgetError (with the buffer listing) when it does not fit. Of `shape`, what
    changes the kernel's tiles is read: dtype, causal and the spec's exact key dims (head_dim,
    rotary_dim)."""
    shape = shape or {}
    spec = op_spec(spec) if isinstance(spec, str) else spec
    exact = [k for k, how in spec.key_dims.items() if how == "exact"]
    probe = {k: shape[k] for k in ("dtype", "causal", *exact) if k in shape}
    name = spec.name
    return _footprint(target, name, tuple(sorted(config.items())), tuple(sorted(probe.items())), policy)
