"""tilejit's library kernels: matmul, layer_norm / rms_norm / add_rms_norm, attention.

Each op is a `@kernel` tile program, a torch-facing wrapper with argument checks, a config space
(`CONFIGS`), a default config per target (`DEFAULT_CONFIGS`), a deterministic `config_for` and an
fp64 torch reference (`*_ref`). Configs depend only on non-batch dimensions (N and K of a matmul,
the row length of a norm, head_dim and seq_k of attention), so results are batch-invariant.

    from kernels import matmul, rms_norm, attention, config_for
    config_for("matmul", "cpu", M=4096, N=1024, K=512)   # M is ignored
"""
from __future__ import annotations

from . import attention as _attention_mod
from . import matmul as _matmul_mod
from . import norm as _norm_mod
from .attention import attention, attention_ref
from .matmul import matmul, matmul_ref
from .norm import add_rms_norm, add_rms_norm_ref, layer_norm, layer_norm_ref, rms_norm, rms_norm_ref

_CONFIG_FNS = {
    "matmul": _matmul_mod.config_for,
    "layer_norm": _norm_mod.config_for,
    "rms_norm": _norm_mod.config_for,
    "add_rms_norm": _norm_mod.config_for,
    "attention": _attention_mod.config_for,
}

CONFIGS = {
    "matmul": _matmul_mod.CONFIGS,
    "layer_norm": _norm_mod.CONFIGS,
    "rms_norm": _norm_mod.CONFIGS,
    "add_rms_norm": _norm_mod.CONFIGS,
    "attention": _attention_mod.CONFIGS,
}

DEFAULT_CONFIGS = {
    "matmul": _matmul_mod.DEFAULT_CONFIGS,
    "layer_norm": _norm_mod.DEFAULT_CONFIGS,
    "rms_norm": _norm_mod.DEFAULT_CONFIGS,
    "add_rms_norm": _norm_mod.DEFAULT_CONFIGS,
    "attention": _attention_mod.DEFAULT_CONFIGS,
}


def config_for(op: str, target=None, **shape) -> dict:
    """The block sizes `op` uses on `target` (a name such as "cpu", a target object, or None for the
    current target) for a problem of `shape`:

    - matmul: N, K (M is ignored);
    - layer_norm / rms_norm / add_rms_norm: N, the row length (the number of rows is ignored);
    - attention: head_dim, seq_k (seq_q only sizes BLOCK_M, which does not affect results;
      batch and heads are ignored).
    """
    fn = _CONFIG_FNS.get(op)
    if fn is None:
        raise ValueError(f"config_for: unknown op {op!r}; choose one of {', '.join(_CONFIG_FNS)}")
    return fn(op, target, **shape)


__all__ = ["matmul", "matmul_ref", "layer_norm", "layer_norm_ref", "rms_norm", "rms_norm_ref", "add_rms_norm",
           "add_rms_norm_ref", "attention", "attention_ref", "config_for", "CONFIGS", "DEFAULT_CONFIGS"]
