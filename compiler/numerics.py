"""Numerics policies: `fast` (the target's native dot and math, fp32 accumulation, fixed
orders) and `strict` (bitwise-identical on every target). The policy is chosen per call, per
kernel or globally, and is part of every cache key."""
from __future__ import annotations

import contextlib
import contextvars
import os

from .errors import InternalError, TilejitError
from .ir import Function

POLICIES = ("fast", "strict")
_override: contextvars.ContextVar = contextvars.ContextVar("tilejit_numerics", default=None)


def validate_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise TilejitError(f"unknown numerics policy {policy!r}; choose one of {', '.join(POLICIES)}")
    return policy


_default = None


def current_policy() -> str:
    """`numerics(...)` block, else TILEJIT_NUMERICS (read at the first launch), else fast."""
    p = _override.get()
    if p is not None:
        return p
    global _default
    if _default is None:
        _default = validate_policy(os.environ.get("TILEJIT_NUMERICS", "") or "fast")
    return _default


def policy_of(fn: Function) -> str:
    """The numerics policy `fn` was lowered under, as KernelFunction.lower records it in the
    specialisation. Targets render and build by it, never by the ambient policy: a function
    without one is a tilejit bug, refused rather than rendered under a guess its cache key
    would not describe."""
    policy = fn.specialization.get("numerics")
    if policy not in POLICIES:
        raise InternalError(
            f"internal error in tilejit: kernel '{fn.name}' reached its target without a numerics "
            f"policy in its specialisation (found {policy!r}, expected one of {', '.join(POLICIES)}): "
            "a bug in tilejit, not in the kernel",
            kernel=fn.name)
    return policy


@contextlib.contextmanager
def numerics(policy: str):
    """`with numerics("strict"): ...` sets the policy for launches in the block."""
    token = _override.set(validate_policy(policy))
    try:
        yield policy
    finally:
        _override.reset(token)


def lower_numerics(fn: Function, policy: str, target=None) -> None:
    """Rewrites ops whose numerics the policy defines. `fast` keeps the IR as it is, except on
    targets that ask for the software math sequences (`Target.fast_software_math`), and for the
    NaN rule of max/min reductions (compiler/value_rules.py) where the target's own reductions
    do not follow it (`Target.nan_ignoring_reductions`)."""
    from .fast_math import lower_software_math  # noqa: PLC0415
    from .strict import lower_strict  # noqa: PLC0415
    from .value_rules import lower_nan_reductions  # noqa: PLC0415
    validate_policy(policy)
    if target is None or policy not in target.nan_ignoring_reductions:
        lower_nan_reductions(fn)
    if policy == "strict":
        lower_strict(fn)
    elif target is not None and target.fast_software_math:
        sw = target.fast_software_math
        lower_software_math(fn, None if sw is True else frozenset(sw))
