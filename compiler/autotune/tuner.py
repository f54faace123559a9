"""The generic tuner: candidates in, one stored decision out, for any tunable thing.

`tune(space, run, check, key, store=...)` checks every candidate's output (`run(config)`, then
`check(output)` -> None or why it is wrong), times the ones that pass in pairs with a reference
(the baseline, else the first candidate: timing.py, the ratio of the fastest samples with the
median per-pair ratio beside it, each side checked against a run on one thread), records each
result per config in the decision store under `key` and lets the store pick the winner; a
candidate that would displace the baseline is timed against it once more first, and stored only
if its gain shows again. A candidate whose timing stays implausible, or whose gain does not
show again, is not stored: it is reported untrusted and measured again by the next run, as is a
result stored before this way of timing.

Candidates are timed on one thread (timing.threads): on all threads each side waits its own thread
wake-ups and scheduler slices, and small ops cross the grain rule's threshold in one run and not
the next, so two runs decided differently far more often (figures: docs/tuning.md). One thread is
also what a launch of a few microseconds runs on. A winner that would displace the baseline is then
timed against it on every thread and not stored if clearly slower there (fewer programs than
threads); where other work holds the cores as the key starts (timing.others_busy), that check is
skipped and the median per-pair ratio is not kept, since both would measure the other work. Where
the target cannot run here, `estimate(config)` (seconds from a cost model) replaces running and
timing, and every result is labelled estimated. A config whose result the store already holds for
this key is not measured again, so adding a candidate measures only it; `force=True` measures (or
estimates) every candidate again and replaces the stored results.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import time

from ..cache.decisions import MIN_GAIN, DecisionStore, config_key, result, winner_of
from ..errors import InternalError, TilejitError
from .timing import (BUSY_CORES, MAX_SAMPLES, METHOD, SPREAD_GOAL, UNSETTLED, Timing, checked, measure_call,
                     measure_pair, others_busy, spread, thread_count, threads)

__all__ = ["MEASURE_COUNT", "DecisionKey", "Tuned", "tune", "time_call", "measure_call", "Timing", "spread",
           "SPREAD_GOAL", "MAX_SAMPLES"]

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
    untrusted_now: list = dataclasses.field(default_factory=list)  # (config key, why) timed but not believed
    busy: bool = False  # other work held the cores: the winner was not checked on every thread


def time_call(fn, repeat: int) -> float:
    """`measure_call(fn, repeat).seconds`."""
    return measure_call(fn, repeat).seconds


def _first_line(exc: BaseException) -> str:
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg.splitlines()[0] if msg else ''}".rstrip(": ")


def _measure(cfg: dict, eff: dict, run, check, repeat: int, ref=None, busy: bool = False) -> dict:
    """Checks and times one candidate; `ref` = (config key, its function): the candidate is timed
    in pairs with it (None: this is the reference, timed alone). `busy`: other work holds the
    cores, so the median per-pair ratio measures it, not the configs: it is not stored (the store's
    rule that the median must agree then does not apply)."""
    MEASURE_COUNT["n"] += 1
    try:
        bad = check(run(eff))
        if bad:
            return result(cfg, "rejected", reason=bad, effective=eff)
        fn = lambda: run(eff)   # noqa: E731
        if ref is None:
            c = checked(lambda: measure_call(fn, repeat), (fn,))
            t, pair = c.m, {"ratio": 1.0, "ratio_spread": 0.0, "ref": config_key(cfg)}
        else:
            c = checked(lambda: measure_pair(fn, ref[1], repeat), (fn, ref[1]))
            # what decides: the ratio of the fastest samples (and how far the halves disagree on it)
            t, pair = c.m.a, {"ratio": round(c.m.ratio_best, 5), "ratio_spread": round(c.m.best_spread, 4),
                              "ref": ref[0], **({} if busy else {"ratio_median": round(c.m.ratio, 5)})}
        timed = dict(time_s=t.seconds, best_s=t.best, spread=round(t.spread, 4), samples=t.samples, **pair,
                     method=METHOD, effective=eff, **({"one_thread": True} if c.one_thread else {}))
        if c.why and ref is not None:   # the reference's ratio is 1 whatever its samples did
            return result(cfg, "untrusted", reason=c.why, **timed)
        return result(cfg, "ok", **timed)
    except InternalError:   # a tilejit bug is not a config the target cannot build
        raise
    except (TilejitError, ValueError, RuntimeError) as exc:
        return result(cfg, "rejected", reason=_first_line(exc), effective=eff)


def _estimate(cfg: dict, eff: dict, estimate) -> dict:
    try:
        return result(cfg, "ok", time_s=float(estimate(eff)), estimated=True, effective=eff)
    except InternalError:
        raise
    except Exception as exc:  # noqa: BLE001 - a cost model's refusal (e.g. over the LM budget) rejects
        return result(cfg, "rejected", reason=_first_line(exc), estimated=True)


def _build_ahead(build, configs: list[dict], workers: int) -> None:
    """Compiles `configs` (build(config) compiles without running) on `workers` threads: the C++
    compiler runs outside the GIL, so the candidates of a batch build on every core. A build that
    fails is left for the measurement, which rejects it with the message."""
    if build is None or workers < 2 or len(configs) < 2:
        return
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(configs))) as pool:
        # each thread runs in a copy of this context: target, policy and compile-only mode
        for f in [pool.submit(contextvars.copy_context().run, build, c) for c in configs]:
            try:
                f.result()
            except Exception:  # noqa: BLE001
                pass


def _reusable(r: dict) -> bool:
    """A stored result this run takes as it is: an estimate, a rejection, or a timing taken the
    current way (paired, checked against one thread); an older timing is measured again."""
    return r.get("status") != "ok" or bool(r.get("estimated")) or r.get("method") == METHOD


def tune(space, run, check, key: DecisionKey, *, store: DecisionStore, estimate=None, effective=None,
         repeat: int = 3, deadline: float | None = None, progress=None, force: bool = False,
         build=None, workers: int = 1, baseline: str | None = None) -> Tuned:
    """Tunes `space` (a list of config dicts) for `key`; see the module docstring.

    effective(config) -> (config launched, why pruned or None) maps a candidate to what it runs as;
    candidates that run as the same config share one measurement. `deadline` (perf_counter time)
    leaves the rest unmeasured ("skipped") once the key has a result, so the first candidate
    (put the default first) is measured whatever the budget; `progress(i, n, config_key)` is
    called per candidate. With `build` (compile a config without running it), each batch of
    `workers` candidates is compiled in parallel before its members are timed one at a time.
    `baseline` (a config key, e.g. the op's default) stays the winner unless a measured candidate
    beats it by more than the timings' noise (cache/decisions.py); the candidates are timed in
    pairs with it (without one, with the first candidate)."""
    known = {} if force else store.results(key.op, key.target, key.fingerprint, key.policy, key.shape_key)
    known = {k: r for k, r in known.items() if _reusable(r)}
    out = Tuned(entry={})
    by_effect = {}
    has_result = any(r.get("status") == "ok" for r in known.values())
    new, todo, effs = _sort_space(space, known, effective, out)
    batch = max(1, workers if estimate is None and build is not None else 1)
    # the reference every measured candidate is paired with: the baseline, else the first candidate
    ref_key = baseline if effs.get(baseline) is not None else next((ck for _, _, ck, _ in todo), None)
    ref = None
    if estimate is None and ref_key is not None and ref_key in known and known[ref_key].get("status") == "ok":
        ref = (ref_key, lambda eff=effs[ref_key]: run(eff))

    def over():   # past the deadline, once the key has a result
        return deadline is not None and has_result and time.perf_counter() > deadline

    # ranked on one thread (module docstring); the winner checked on all `n` unless the cores are busy
    n = thread_count()
    out.busy = estimate is None and bool(todo) and n > 1 and others_busy() >= BUSY_CORES
    with threads(1) if estimate is None else contextlib.nullcontext():
        b = 0
        while b < len(todo) and not over():
            # a spent budget measures only the first candidate: nothing else is built ahead for it
            late = deadline is not None and time.perf_counter() > deadline
            group = todo[b:b + (1 if late else batch)]
            _build_ahead(build, [eff for *_, eff in group if config_key(eff) not in by_effect], workers)
            for i, cfg, ck, eff in group:
                if over():
                    break
                b += 1
                if progress is not None:
                    progress(i, len(space), ck)
                ek = config_key(eff)
                if ek in by_effect:   # the same launch as an earlier candidate
                    new[ck] = {**by_effect[ek], "config": dict(cfg), "effective": eff, "same_as": by_effect[ek]["key"]}
                    continue
                if estimate is not None:
                    out.estimated += 1
                    r = _estimate(cfg, eff, estimate)
                else:
                    out.measured += 1
                    r = _measure(cfg, eff, run, check, repeat, ref, out.busy)
                    if ref is None and r["status"] == "ok":   # the reference: the rest are paired with it
                        ref = (ck, lambda eff=eff: run(eff))
                if r["status"] == "untrusted":   # not stored: measured again by the next run
                    out.untrusted_now.append((ck, r["reason"]))
                    continue
                if r["status"] == "rejected":
                    out.rejected_now.append((ck, r["reason"]))
                has_result = has_result or r["status"] == "ok"
                by_effect[ek] = {**{k: v for k, v in r.items() if k != "config"}, "key": ck}
                new[ck] = r
        out.skipped += len(todo) - b
        space_keys = {config_key(c) for c in space}
        if estimate is None and ref is not None and ref[0] == baseline:
            stored = store.results(key.op, key.target, key.fingerprint, key.policy, key.shape_key)
            _confirm(new, stored, baseline, space_keys, effs, run, ref, repeat, out, 1 if out.busy else n)
    out.fresh = set(new)
    out.entry = store.record(key.op, key.target, key.fingerprint, key.policy, key.shape_key, key.dims, new,
                             space_keys, baseline=baseline)
    return out


def _sort_space(space, known: dict, effective, out: Tuned) -> tuple[dict, list, dict]:
    """(results decided without a run: the pruned; the candidates to measure or estimate, as
    (index, config, key, effective config); config key -> effective config, None when pruned).
    Candidates with a result `known` are reused (counted in `out`)."""
    new, todo, effs = {}, [], {}
    for i, cfg in enumerate(space):
        ck = config_key(cfg)
        eff, why = effective(cfg) if effective else (dict(cfg), None)
        effs[ck] = None if why else eff
        if ck in known:
            out.reused += 1
        elif why:
            new[ck] = result(cfg, "pruned", reason=why)
        else:
            todo.append((i, cfg, ck, eff))
    return new, todo, effs


def _confirm(new: dict, stored: dict, baseline: str, space_keys, effs: dict, run, ref, repeat: int, out,
             n: int) -> None:
    """A candidate measured in this run that would displace the baseline is timed against it once
    more, in new pairs: a gain that does not show again (a busy spell that slowed the baseline's
    samples only, or sped up the candidate's) is not stored, and the next best is confirmed. Where
    `n` > 1 it is timed against it on `n` threads too, and not stored if slower there."""
    while True:
        w = winner_of({**stored, **new}, baseline, space_keys)
        if w is None or w == baseline or w not in new or "same_as" in new[w] or effs.get(w) is None:
            return
        fn = lambda eff=effs[w]: run(eff)   # noqa: E731
        c = checked(lambda: measure_pair(fn, ref[1], repeat), (fn, ref[1]))
        margin = max(MIN_GAIN, new[w].get("ratio_spread") or 0.0, c.m.best_spread)
        if not c.why and c.m.ratio_best * (1 + margin) < 1 and (out.busy or c.m.ratio < 1):
            why = _slower_on(n, fn, ref[1], repeat)
            if why is None:
                return
        else:
            why = c.why or (f"its gain over the default did not show again: {1 / new[w]['ratio']:.2f}x, then "
                            f"{1 / c.m.ratio_best:.2f}x in new pairs")
        out.untrusted_now.append((w, why))
        for k in [k for k, r in new.items() if k == w or r.get("same_as") == w]:
            del new[k]


def _slower_on(n: int, fn, ref_fn, repeat: int) -> str | None:
    """Why a winner on one thread is not kept: slower than the baseline on `n` threads by more
    than UNSETTLED and the noise (None: it is not, or `n` is 1)."""
    if n < 2:
        return None
    with threads(n):
        c = checked(lambda: measure_pair(fn, ref_fn, repeat), (fn, ref_fn))
    # only a clear loss: near the grain rule's threshold a launch goes parallel in one run and not
    # in the next, which moves small ops by 10-25% on many threads (one thread is what decides)
    if c.why is None and c.m.ratio_best > 1 + max(UNSETTLED, c.m.best_spread):
        return f"faster than the default on one thread, but {c.m.ratio_best:.2f}x its time on {n} threads"
    return None
