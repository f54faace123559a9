"""Helpers shared by the library kernels: argument checks, target lookup and config tables."""
from __future__ import annotations

import contextlib
import contextvars

import torch

from compiler import current_target, get_target

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def npow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def resolve_target(target=None):
    """A target object from a name, an object or None (the current target)."""
    if target is None:
        return current_target()
    if isinstance(target, str):
        return get_target(target)
    return target


def target_key(target=None) -> str:
    """The config-table key of a target: its name without the variant ("kunlun:xpu2" -> "kunlun")."""
    if isinstance(target, str):
        return target.split(":")[0]
    return resolve_target(target).name.split(":")[0]


_TUNED = contextvars.ContextVar("tilejit_tuned_decisions", default=True)


@contextlib.contextmanager
def tuned_decisions(enabled: bool):
    """`with tuned_decisions(False):` makes config_for ignore the autotuner's stored decisions."""
    token = _TUNED.set(bool(enabled))
    try:
        yield
    finally:
        _TUNED.reset(token)


def _tuned(table: dict, target, op: str, dims: dict):
    """The autotuner's decision for `op` and its non-batch `dims`, shaped like `table`'s entries;
    None on a miss (CacheError on a miss in strict-cache mode)."""
    try:
        tgt = resolve_target(target)
    except Exception:  # noqa: BLE001 - an unknown target (e.g. "kunlun:xpu2" here) has no decisions
        return None
    from compiler.autotune.shapes import shape_key  # noqa: PLC0415
    from compiler.autotune.store import lookup_or_default  # noqa: PLC0415
    from compiler.numerics import current_policy  # noqa: PLC0415
    cfg = lookup_or_default(op, tgt, current_policy(), shape_key(op, **dims))
    if cfg is None:
        return None
    sample = next(iter(table.values()))
    if isinstance(sample, dict) and sample and isinstance(next(iter(sample.values())), dict):
        return {k: dict(cfg) for k in sample}   # attention's {"small": cfg, "large": cfg}
    return cfg


def default_for(table: dict, target, op: str | None = None, dims: dict | None = None) -> dict:
    """The autotuner's stored decision for `op` and its non-batch `dims`, when one exists (see
    compiler.autotune); else `table[target]`, falling back to the target family and then to "cpu"."""
    if op is not None and _TUNED.get():
        tuned = _tuned(table, target, op, dims or {})
        if tuned is not None:
            return tuned
    if isinstance(target, str) and target in table:
        return dict(table[target])
    key = target_key(target)
    return dict(table.get(key, table["cpu"]))


def check_tensor(op: str, name: str, t, *, dims=None, dtypes=FLOAT_DTYPES) -> None:
    """TypeError unless `t` is a tensor of one of `dtypes`; ValueError unless it has `dims` dims."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{op}: argument '{name}' has dtype {str(t.dtype).replace('torch.', '')}; "
                        f"supported dtypes are {allowed}")
    if dims is not None:
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if t.dim() not in dims:
            want = " or ".join(f"{d}-D" for d in dims)
            raise ValueError(f"{op}: argument '{name}' must be {want}, got shape {tuple(t.shape)}")


def check_same_dtype(op: str, ref_name: str, ref: torch.Tensor, **others) -> None:
    for name, t in others.items():
        if t is not None and t.dtype != ref.dtype:
            raise TypeError(f"{op}: argument '{name}' has dtype {str(t.dtype).replace('torch.', '')} but "
                            f"'{ref_name}' has {str(ref.dtype).replace('torch.', '')}; they must match")


def check_device(op: str, **tensors) -> None:
    """ValueError unless every tensor lives on the device type the current target runs on."""
    want = getattr(current_target(), "device_type", "cpu")
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device.type != want:
            raise ValueError(f"{op}: argument '{name}' is on device '{t.device}', but the current "
                             f"target '{current_target().name}' runs on '{want}' tensors")
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ValueError(f"{op}: argument '{name}' is on {t.device} but '{first[0]}' is on {first[1]}")
