"""tilejit's library kernels: matmul, layer_norm / rms_norm / add_rms_norm, attention.

Each op module is a `@kernel` tile program, a torch-facing wrapper with argument checks that calls
the op's torch operator (`tilejit::<op>`, registered by `kernels.torch_ops.define`), an fp64
torch reference (`*_ref`) and its op spec (`SPECS`: config space, default config per target tile
class, clamps, tuning problems; see compiler.opspec). Every module of this package that exports
`SPECS` is found here, so a new op is one new file. Configs depend only on non-batch dimensions
(N and K of a matmul, the row length of a norm, head_dim and seq_k of attention), so results are
batch-invariant.

    from kernels import matmul, rms_norm, attention, config_for
    config_for("matmul", "cpu", M=4096, N=1024, K=512)   # M chooses only bit-neutral params
"""
from __future__ import annotations

import importlib
import pkgutil

from compiler.opspec import OpSpec

from .attention import attention, attention_ref
from .configs import select
from .matmul import matmul, matmul_ref
from .norm import add_rms_norm, add_rms_norm_ref, layer_norm, layer_norm_ref, rms_norm, rms_norm_ref


def _discover() -> dict[str, OpSpec]:
    """name -> OpSpec of every op module in this package (modules whose name starts with '_', and
    the shared helpers, export none)."""
    found: dict[str, OpSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for spec in getattr(mod, "SPECS", ()):
            if spec.name in found:
                raise ImportError(f"kernels: op '{spec.name}' is declared twice (kernels/{info.name}.py and another)")
            found[spec.name] = spec
    return found


OP_SPECS: dict[str, OpSpec] = _discover()

# tells this package from other distributions' `kernels` (compiler/names.py). No __version__ here on
# purpose: transformers looks for Hugging Face's `kernels` package by its name and version.
__tilejit__ = True


def config_for(op: str, target=None, **dims) -> dict:
    """The block sizes `op` launches on `target` (a name such as "cpu", a target object, or None for
    the current target) for a problem of these dims; only the op's key dims are read:

    - matmul: N, K (M only sizes the params that cannot change a bit on the target: BLOCK_M,
      and BLOCK_N / BLOCK_K where the dot chains across tiles, as on cpu and kunlun);
    - layer_norm / rms_norm / add_rms_norm: N, the row length (the number of rows is ignored);
    - attention: head_dim, seq_k (seq_q only sizes BLOCK_M, which does not affect results;
      batch and heads are ignored);
    - the backward passes: matmul_backward N, K; rms_norm_backward / layer_norm_backward N;
      attention_backward head_dim, seq_k (seq_q).
    """
    spec = OP_SPECS.get(op)
    if spec is None:
        raise ValueError(f"config_for: unknown op {op!r}; choose one of {', '.join(OP_SPECS)}")
    return select(spec, target, **dims)


__all__ = ["matmul", "matmul_ref", "layer_norm", "layer_norm_ref", "rms_norm", "rms_norm_ref", "add_rms_norm",
           "add_rms_norm_ref", "attention", "attention_ref", "config_for", "OP_SPECS"]
