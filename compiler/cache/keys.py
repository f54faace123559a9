"""Cache keys: a sha256 over a canonical JSON encoding, identical in every process and on every
machine, that refuses anything whose encoding would be ambiguous; and what the key of a compiled
kernel is made of (`cache_key`)."""
from __future__ import annotations

import hashlib
import json

from ..ir import structural_hash
from ..version import compiler_source_hash

__all__ = ["stable_hash", "cache_key"]


def _canonical(obj, stack: set[int]):
    """Reduce ``obj`` to JSON types, rejecting anything whose encoding would be ambiguous."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        # NaN/inf are not JSON, and NaN != NaN would make "equal" keys differ anyway.
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise TypeError(f"stable_hash: non-finite float {obj!r} is not hashable")
        return obj  # repr() is the shortest round-trip form: deterministic everywhere
    if isinstance(obj, (list, tuple, dict)):
        if id(obj) in stack:
            raise TypeError("stable_hash: circular reference")
        stack.add(id(obj))
        try:
            if isinstance(obj, dict):
                for k in obj:
                    # json would silently turn 1 into "1", making {1: x} and {"1": x} collide.
                    if not isinstance(k, str):
                        raise TypeError(f"stable_hash: dict keys must be str, got {type(k).__name__}")
                return {k: _canonical(v, stack) for k, v in obj.items()}
            return [_canonical(v, stack) for v in obj]
        finally:
            stack.discard(id(obj))
    raise TypeError(f"stable_hash: cannot encode object of type {type(obj).__name__}")


def stable_hash(obj) -> str:
    """sha256 hex digest of a canonical JSON encoding of ``obj``; identical in every process.

    Accepted: None, bool, int, finite float, str, and lists/tuples/dicts (str keys) of those.
    Dict key order does not matter. Tuples encode exactly like lists, so ``(1, 2)`` and ``[1, 2]``
    hash the same (they compare as the same specialisation). Types JSON keeps apart stay apart:
    ``1``, ``1.0``, ``True`` and ``"1"`` all differ; ``0.0`` and ``-0.0`` differ.
    Raises TypeError for anything else (sets, bytes, objects, non-str keys, NaN, cycles).
    """
    # ensure_ascii (default): non-ASCII, even a lone surrogate, becomes a \uXXXX escape: never fails.
    text = json.dumps(_canonical(obj, set()), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def cache_key(fn_ir, target, policy: str) -> str:
    """The kernel-cache key of one lowered specialisation: the IR (with its specialisation), the
    target's fingerprint (not its name), the policy and the compiler's own sources."""
    return stable_hash({
        "ir": structural_hash(fn_ir),
        "target": target.fingerprint(),
        "policy": policy,
        "compiler": compiler_source_hash(),
    })
