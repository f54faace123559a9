"""Which config a library op launches: the autotuner's stored decision for the op's non-batch
dims on this target, else the op spec's default for the target's tile class, then the spec's
clamps (and, in the strict policy, its fixed summation-order parameters).

The answer depends only on (op, target, policy, dims), so it is memoised: after the first call
for a shape, a lookup is one dict hit. The memo is dropped whenever the decision store changes
(`compiler.cache.decisions.generation()`), and is keyed by the cache directory settings and the
strict-cache mode (`settings_stamp()`), which change which decisions are visible."""
from __future__ import annotations

import contextlib
import contextvars

import torch

from compiler import current_target, get_target
from compiler.cache import decisions
from compiler.cache.safety import settings_stamp
from compiler.numerics import current_policy
from compiler.opspec import OpSpec

_TUNED = contextvars.ContextVar("tilejit_tuned_decisions", default=True)
_memo: dict[tuple, dict] = {}


@contextlib.contextmanager
def tuned_decisions(enabled: bool):
    """`with tuned_decisions(False):` makes config_for ignore the autotuner's stored decisions."""
    token = _TUNED.set(bool(enabled))
    try:
        yield
    finally:
        _TUNED.reset(token)


def resolve_target(target=None):
    """A target object from a name, an object or None (the current target)."""
    if target is None:
        return current_target()
    if isinstance(target, str):
        return get_target(target)
    return target


def select(spec: OpSpec, target=None, **dims) -> dict:
    """The config `spec`'s op launches on `target` (None: the current one) for `dims` (a copy)."""
    return dict(shared(spec, target, dims))


def narrow_dots(dtype) -> bool:
    """Whether a library kernel keeps its fp16/bf16 dot operands narrow: the fast policy, on a
    target whose matrix units run them far faster than fp32 (`Caps.narrow_dots`, docs/numerics.md)."""
    return (dtype in (torch.float16, torch.bfloat16) and current_policy() == "fast"
            and str(dtype).removeprefix("torch.") in current_target().caps.narrow_dots)


def context() -> tuple:
    """What decides a library op's configs besides its dims: (target, policy, whether tuned
    decisions are used, the decision store's generation, the cache settings). Memos of configs,
    and of whole launches (kernels/op_plans.py), are keyed by it."""
    return current_target(), current_policy(), _TUNED.get(), decisions.generation(), settings_stamp()


def shared(spec: OpSpec, target, dims: dict) -> dict:
    """`select`'s memoised dict itself, for callers that only read it (the library ops): after the
    first call for a shape key, a context read and one dict hit."""
    ctx = context()
    tgt = ctx[0] if target is None else resolve_target(target)
    key = (spec.name, tgt, *ctx[1:], *dims.items())
    cfg = _memo.get(key)
    if cfg is None:
        policy, tuned = key[2], key[3]
        # lookup_or_default ignores (with a warning) a stored winner the op could not run
        found = decisions.lookup_or_default(spec.name, tgt, policy, spec.shape_key(**dims)) if tuned else None
        cfg = spec.launched(found or spec.default_config(tgt.caps, dims), dims, policy, tgt.caps)
        if len(_memo) > 4096:
            _memo.clear()
        _memo[key] = cfg
    return cfg
