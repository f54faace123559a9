"""Tuning the library ops: every op spec (compiler.opspec) on its shapes, through the generic tuner.

For each op and shape the candidates are the spec's space for the target's tile class; a
candidate that would not run as given on this shape is "pruned" (it runs as a smaller candidate),
one the target cannot compile or that gives a wrong result is "rejected" with the message, and the
rest are timed on this machine where the target's timings mean something (`Caps.measurable`) or
ranked by the target's cost model (`Target.estimate`, each decision labelled "estimated").
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
import time

from ..cache.decisions import DecisionStore, clear_memo, config_key, fingerprint_hash
from ..opspec import OpSpec, library_ops
from .tuner import SPREAD_GOAL, DecisionKey, measure_call, time_call, tune

__all__ = ["AutotuneError", "tune_ops", "load_shapes"]


class AutotuneError(Exception):
    pass


def load_shapes(path=None, quick: bool = False, specs: dict[str, OpSpec] | None = None) -> dict:
    """{op: [shape, ...]}: from a shapes file ({"shapes": {op: [...]}, "quick": {op: [...]}}), or
    when `path` is None, every op spec's own `tune_shapes` (`quick_shapes` with `quick`)."""
    if path is None:
        specs = specs if specs is not None else library_ops()
        return {name: list(s.quick_shapes if quick else s.tune_shapes) for name, s in specs.items()}
    doc = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    if quick and "quick" in doc:
        return doc["quick"]
    return doc.get("shapes", doc)


def _runnable(tgt) -> bool:
    if not tgt.caps.measurable and not tgt.has_cost_model:
        raise AutotuneError(
            f"target {tgt.name!r} cannot run kernels on this machine and has no cost model "
            f"(no estimate(spec, config, shape)), so there is nothing to rank candidates by; "
            f"run the autotuner on a machine with this target (measurements are never faked)")
    if tgt.caps.measurable and tgt.device_type != "cpu":
        # the op specs' problems are CPU tensors, timed by the host clock with no device sync
        raise AutotuneError(
            f"target {tgt.name!r} runs on {tgt.device_type} tensors, and the autotuner times its problems as "
            f"CPU tensors on the host clock, so it cannot tune on this device yet. To choose configs here, "
            f"time the candidates with `python benchmarks/gpu_configs.py` and pass the winner as config=...; "
            f"to pre-build the defaults for the device, name its arch (`--target gpu --arch sm_90`)")
    return tgt.caps.measurable


def _space(spec: OpSpec, tgt, ctx: dict) -> list[dict]:
    return [dict(c) for c in (ctx["spaces"] or {}).get(spec.name) or spec.candidates(tgt.caps)]


def _build_only(prob, cfg: dict) -> None:
    """Compiles the kernels `prob.run(cfg)` launches, running none of them."""
    from .. import compile_only  # noqa: PLC0415
    with compile_only():
        prob.run(cfg)


def _time_here(prob, cfg: dict, ctx: dict):
    """The Timing of `cfg` on this problem (not stored), or None where it fails."""
    try:
        return measure_call(lambda: prob.run(cfg), ctx["repeat"])
    except Exception:  # noqa: BLE001
        return None


def _tune_one(spec: OpSpec, shape: dict, tgt, ctx: dict) -> dict:
    """One (op, shape): the generic tuner over the spec's candidates; returns the summary row."""
    policy, runnable = ctx["policy"], ctx["runnable"]
    dims = spec.dims_of(shape)
    skey = spec.shape_key(**dims)
    default_cfg = spec.launched(spec.default_config(tgt.caps, dims), dims, policy, tgt.caps)
    dk = config_key(default_cfg)
    # the default first: it is measured even when the budget is spent, so every shape gets a winner
    space = sorted(_space(spec, tgt, ctx), key=lambda c: config_key(c) != dk)
    prob = spec.problem(shape) if runnable else None
    ref = prob.ref() if runnable else None
    key = DecisionKey(spec.name, tgt.name, ctx["fp"], policy, skey, spec.key_of(**dims))
    out = ctx["out"]

    def progress(i, n, ck):
        if ctx["progress"]:
            print(f"\r[{ctx['job']}] {spec.name} {skey}  config {i + 1}/{n} {ck:<40}", end="", file=out, flush=True)

    tuned = tune(space, (lambda cfg: prob.run(cfg)) if runnable else None,
                 (lambda o: prob.check(o, ref)) if runnable else None, key, store=ctx["store"],
                 estimate=None if runnable else (lambda cfg: tgt.estimate(spec, cfg, dict(shape))),
                 effective=lambda cfg: spec.effective(cfg, {**shape, **dims}, policy, tgt.caps),
                 repeat=ctx["repeat"], deadline=ctx["deadline"], progress=progress, force=ctx["force"],
                 build=(lambda cfg: _build_only(prob, cfg)) if runnable else None, workers=ctx["workers"],
                 baseline=dk)
    ctx["rejected"] += [(spec.name, skey, ck, why) for ck, why in tuned.rejected_now]
    entry, res = tuned.entry, tuned.entry["results"]
    winner = entry.get("winner")
    kind = ("no winner" if not winner else "reused" if winner not in tuned.fresh
            else "estimated" if entry.get("estimated") else "measured")
    time_s, spread = entry.get("winner_time_s"), res.get(winner, {}).get("spread")
    default_t = res.get(dk, {}).get("time_s") if res.get(dk, {}).get("status") == "ok" else None
    if runnable and kind == "reused":
        # the stored times may be another shape's with the same key dims: time the winner (and
        # the default, below) on this shape, unstored, so the row compares like with like
        here = _time_here(prob, spec.launched(entry["winner_config"], dims, policy, tgt.caps), ctx)
        time_s, spread, default_t = (here.seconds, here.spread, None) if here else (None, None, None)
    if default_t is None and runnable and winner:   # e.g. the default is not in the space
        here = _time_here(prob, default_cfg, ctx)
        default_t = here.seconds if here else None
    eager_t = None
    if runnable and prob.eager is not None and entry.get("winner"):
        # in the caller's grad mode: a backward op's baseline runs torch's autograd (its inputs
        # alone require grad, so a forward baseline records nothing either way)
        eager_t = time_call(prob.eager, ctx["repeat"])
    unsettled = sum(res[k].get("spread", 0) > SPREAD_GOAL for k in tuned.fresh if res.get(k, {}).get("status") == "ok"
                    and not res[k].get("estimated") and "same_as" not in res[k])
    return dict(op=spec.name, shape=spec.describe(shape), shape_key=skey, winner=winner, kind=kind,
                time_s=time_s, spread=spread, unsettled=unsettled,
                default=dk, default_time_s=default_t, eager_time_s=eager_t,
                estimated=bool(entry.get("estimated")), measured=tuned.measured, estimated_now=tuned.estimated,
                reused=tuned.reused, skipped=tuned.skipped,
                rejected=sum(r.get("status") == "rejected" for r in res.values()),
                rejections=list(tuned.rejected_now), pruned=sum(r.get("status") == "pruned" for r in res.values()),
                store=str(ctx["store"].path(spec.name, tgt.name, ctx["fp"], policy)))


def tune_ops(ops=None, shapes=None, *, target="cpu", cache_dir=None, budget=None, policy="fast", spaces=None,
             repeat=3, progress=True, quick=False, out=None, force=False, verbose=False) -> list[dict]:
    """Tunes library `ops` (names; default: every op with shapes) on `shapes` ({op: [shape dicts]};
    default: the specs' own). Returns one summary row per (op, shape): op, shape, shape_key, winner,
    kind (measured, estimated, reused: the winner's result is from an earlier run, or no winner),
    time_s, spread (of the winner's samples, None when estimated or stored before spreads were),
    unsettled (configs timed in this run whose spread stayed over SPREAD_GOAL), default,
    default_time_s, eager_time_s, estimated, measured and estimated_now (configs run or
    estimated in this run), reused, rejected, rejections (config key, reason: found in this
    run), pruned, skipped, store (the decision file). Each config's result is stored; `force`
    measures every candidate again instead of reusing stored results; `verbose` prints each
    rejection as it happens."""
    from .. import get_target, use_target  # noqa: PLC0415
    from ..numerics import numerics, validate_policy  # noqa: PLC0415

    out = out if out is not None else sys.stderr
    policy = validate_policy(policy)
    tgt = get_target(target) if isinstance(target, str) else target
    specs = library_ops()
    shapes = shapes if shapes is not None else load_shapes(None, quick=quick, specs=specs)
    ops = list(ops) if ops else [op for op in specs if op in shapes]
    for op in ops:
        if op not in specs:
            raise AutotuneError(f"unknown kernel {op!r}; choose from {', '.join(specs)}")
    runnable = _runnable(tgt)
    end = time.perf_counter() + budget if budget else None
    ctx = dict(policy=policy, runnable=runnable, spaces=spaces, fp=fingerprint_hash(tgt), out=out,
               store=DecisionStore(cache_dir), repeat=repeat, rejected=[], force=force,
               workers=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
               # a `\r` progress line only makes sense on a terminal; in logs (CI, pipes) it is noise
               progress=progress and getattr(out, "isatty", lambda: False)())
    jobs = [(specs[op], sh) for op in ops for sh in shapes.get(op, [])]
    sizes = [len(_space(spec, tgt, ctx)) for spec, _ in jobs]
    rows = []
    with use_target(tgt), numerics(policy):
        for ji, (spec, shape) in enumerate(jobs):
            ctx["job"] = f"{ji + 1}/{len(jobs)}"
            # each job's share of what is left, by its number of candidates: one large space
            # cannot spend the budget of the ops after it (time it leaves unused rolls forward)
            ctx["deadline"] = None if end is None else (
                time.perf_counter() + max(0.0, end - time.perf_counter()) * sizes[ji] / max(1, sum(sizes[ji:])))
            n_rej = len(ctx["rejected"])
            rows.append(_tune_one(spec, shape, tgt, ctx))
            for op, skey, ck, why in ctx["rejected"][n_rej:] if verbose else ():
                print(("\n" if ctx["progress"] else "") + f"  rejected {op} {skey} {ck}: {why}", file=out, flush=True)
    if ctx["progress"]:
        print("\r" + " " * 100 + "\r", end="", file=out, flush=True)
    clear_memo()
    return rows
