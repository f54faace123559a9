"""The generic tuner: candidates in, one stored decision out, for any tunable thing.

`tune(space, run, check, key, store=...)` checks every candidate's output (`run(config)`, then
`check(output)` -> None or why it is wrong), times the ones that pass (median of `repeat`
samples), records each result per config in the decision store under `key` and lets the store pick
the winner. Where the target cannot run here, `estimate(config)` (seconds from a cost model)
replaces running and timing, and every result is labelled estimated. A config whose result the
store already holds for this key is not measured again, so adding a candidate measures only it;
`force=True` measures (or estimates) every candidate again and replaces the stored results.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time

from ..cache.decisions import DecisionStore, config_key, result
from ..errors import TilejitError

MEASURE_COUNT = {"n": 0}   # configs measured (checked + timed) in this process; tests count with it


@dataclasses.dataclass(frozen=True)
class DecisionKey:
    """Where a decision is stored: op, target (name and fingerprint hash), policy, shape key, and
    the bucketed dims behind the shape key (kept in the store for reading)."""

    op: str
    target: str
    fingerprint: str
    policy: str
    shape_key: str
    dims: dict


@dataclasses.dataclass
class Tuned:
    entry: dict               # the store's entry for the key: results, winner, winner_config, ...
    measured: int = 0
    reused: int = 0
    skipped: int = 0
    estimated: int = 0        # configs estimated (by the cost model) in this run
    rejected_now: list = dataclasses.field(default_factory=list)   # (config key, reason) found this run
    fresh: set = dataclasses.field(default_factory=set)            # config keys whose result is from this run


def time_call(fn, repeat: int) -> float:
    """Median seconds of `fn()`, each sample long enough (>= 5 ms) that timer resolution and one
    call delayed by the scheduler do not decide it."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    calls = max(1, math.ceil(0.005 / max(best, 1e-7)))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def _first_line(exc: BaseException) -> str:
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg.splitlines()[0] if msg else ''}".rstrip(": ")


def _measure(cfg: dict, eff: dict, run, check, repeat: int) -> dict:
    MEASURE_COUNT["n"] += 1
    try:
        bad = check(run(eff))
        if bad:
            return result(cfg, "rejected", reason=bad, effective=eff)
        return result(cfg, "ok", time_s=time_call(lambda: run(eff), repeat), effective=eff)
    except (TilejitError, ValueError, RuntimeError) as exc:
        return result(cfg, "rejected", reason=_first_line(exc), effective=eff)


def _estimate(cfg: dict, eff: dict, estimate) -> dict:
    try:
        return result(cfg, "ok", time_s=float(estimate(eff)), estimated=True, effective=eff)
    except Exception as exc:  # noqa: BLE001 - a cost model's refusal (e.g. over the LM budget) rejects
        return result(cfg, "rejected", reason=_first_line(exc), estimated=True)


def tune(space, run, check, key: DecisionKey, *, store: DecisionStore, estimate=None, effective=None,
         repeat: int = 3, deadline: float | None = None, progress=None, force: bool = False) -> Tuned:
    """Tunes `space` (a list of config dicts) for `key`; see the module docstring.

    effective(config) -> (config launched, why pruned or None) maps a candidate to what it runs as;
    candidates that run as the same config share one measurement. `deadline` (perf_counter time)
    leaves the rest unmeasured ("skipped"); `progress(i, n, config_key)` is called per candidate."""
    known = {} if force else store.results(key.op, key.target, key.fingerprint, key.policy, key.shape_key)
    out = Tuned(entry={})
    new, by_effect = {}, {}
    for i, cfg in enumerate(space):
        ck = config_key(cfg)
        if progress is not None:
            progress(i, len(space), ck)
        if ck in known:
            out.reused += 1
            continue
        if deadline is not None and time.perf_counter() > deadline:
            out.skipped += 1
            continue
        eff, why = effective(cfg) if effective else (dict(cfg), None)
        if why:
            new[ck] = result(cfg, "pruned", reason=why)
            continue
        ek = config_key(eff)
        if ek in by_effect:   # the same launch as an earlier candidate
            new[ck] = {**by_effect[ek], "config": dict(cfg), "effective": eff, "same_as": by_effect[ek]["key"]}
            continue
        if estimate is not None:
            out.estimated += 1
            r = _estimate(cfg, eff, estimate)
        else:
            out.measured += 1
            r = _measure(cfg, eff, run, check, repeat)
        if r["status"] == "rejected":
            out.rejected_now.append((ck, r["reason"]))
        by_effect[ek] = {**{k: v for k, v in r.items() if k != "config"}, "key": ck}
        new[ck] = r
    out.fresh = set(new)
    space_keys = {config_key(c) for c in space}
    out.entry = store.record(key.op, key.target, key.fingerprint, key.policy, key.shape_key, key.dims, new,
                             space_keys)
    return out
