"""The LM footprint of a library kernel config, from the renderer itself.

The autotuner and the cost model ask "does this config fit?" with the very check a launch makes:
the library op is called on small tensors under `compiler.render_only`, so the kernel goes through
the frontend, the passes and the kunlun renderer (which raises LMBudgetError past the budget), and
nothing is built or run. The footprint depends on the config, dtype and policy, not on the shape,
so answers are memoised.
"""
from __future__ import annotations

import functools

import torch

from compiler import numerics, render_only, use_target


def _call(op: str, cfg: dict, head_dim: int, causal: bool, dtype: torch.dtype) -> None:
    import kernels  # noqa: PLC0415 - kernels import the compiler; keep the target importable alone
    e = functools.partial(torch.empty, dtype=dtype)
    if op == "matmul":
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        kernels.matmul(e(2 * bm, 2 * bk), e(2 * bk, 2 * bn), config=cfg)
    elif op in ("layer_norm", "rms_norm", "add_rms_norm"):
        x, w = e(2, 2 * cfg["BLOCK"] + 1), e(2 * cfg["BLOCK"] + 1)
        {"layer_norm": lambda: kernels.layer_norm(x, w, w, config=cfg),
         "rms_norm": lambda: kernels.rms_norm(x, w, config=cfg),
         "add_rms_norm": lambda: kernels.add_rms_norm(x, x, w, config=cfg)}[op]()
    elif op == "attention":
        q = e(1, 1, 2 * cfg["BLOCK_M"], head_dim)
        kv = e(1, 1, 2 * cfg["BLOCK_N"], head_dim)
        kernels.attention(q, kv, kv, causal=causal, config=cfg)
    else:
        raise ValueError(f"no LM probe for op {op!r}")


@functools.lru_cache(maxsize=4096)
def _footprint(target_name: str, op: str, cfg_items: tuple, head_dim: int, causal: bool, dtype: torch.dtype,
               policy: str) -> int:
    from compiler import get_target  # noqa: PLC0415
    tgt = get_target(target_name)
    with use_target(tgt), numerics(policy), render_only() as seen:
        _call(op, dict(cfg_items), head_dim, causal, dtype)
    return max(sum(b for _, b in tgt.renderer.lm_buffers(r.source)) for r in seen)


def lm_footprint(target, op: str, config: dict, shape: dict | None = None, policy: str = "fast") -> int:
    """Bytes of LM tile buffers per core for `op` with `config` on a kunlun target; raises the
    renderer's LMBudgetError (with the buffer listing) when it does not fit."""
    shape = shape or {}
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    return _footprint(target.name, op, tuple(sorted(config.items())), int(shape.get("head_dim", 64)),
                      bool(shape.get("causal", False)), dtype, policy)
