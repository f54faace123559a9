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
from .timing import SPREAD_GOAL, checked, measure_call, measure_pair, threads
from .tuner import DecisionKey, tune

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
            f"(no estimate(spec, config, shape, policy)), so there is nothing to rank candidates by; "
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


def _estimate_here(tgt, spec, shape: dict, cfg: dict, policy: str) -> float | None:
    """The target's estimate of `cfg` on this shape (not stored), or None where it refuses."""
    try:
        return float(tgt.estimate(spec, cfg, dict(shape), policy))
    except Exception:  # noqa: BLE001
        return None


def _checked_here(fn, repeat: int):
    """The checked timing (timing.Checked) of `fn` alone on this problem, not stored; the error's
    text where a call fails."""
    try:
        return checked(lambda: measure_call(fn, repeat), (fn,))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def _paired_here(fn, base, repeat: int):
    """The checked paired timing (timing.Checked) of `fn` against `base` on this problem, not
    stored; the error's text where a call fails."""
    try:
        return checked(lambda: measure_pair(fn, base, repeat), (fn, base))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


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
                 estimate=None if runnable else (lambda cfg: tgt.estimate(spec, cfg, dict(shape), policy)),
                 effective=lambda cfg: spec.effective(cfg, {**shape, **dims}, policy, tgt.caps),
                 repeat=ctx["repeat"], deadline=ctx["deadline"], progress=progress, force=ctx["force"],
                 build=(lambda cfg: _build_only(prob, cfg)) if runnable else None, workers=ctx["workers"],
                 baseline=dk)
    ctx["rejected"] += [(spec.name, skey, ck, why) for ck, why in tuned.rejected_now]
    entry, res = tuned.entry, tuned.entry["results"]
    winner = entry.get("winner")
    kind = ("no winner" if not winner else "reused" if winner not in tuned.fresh else
            "estimated" if entry.get("estimated") else "measured")
    won = res.get(winner, {})
    row = dict(op=spec.name, shape=spec.describe(shape), shape_key=skey, winner=winner, kind=kind,
               winner_config=entry.get("winner_config"),
               time_s=entry.get("winner_time_s"), best_s=None, spread=won.get("spread"),
               vs_default=None, vs_torch=None, vs_torch_median=None, untrusted=None,
               one_thread=bool(won.get("one_thread")), busy=tuned.busy,
               untrusted_configs=len(tuned.untrusted_now), unsettled=0,
               default=dk, estimated=bool(entry.get("estimated")), measured=tuned.measured,
               estimated_now=tuned.estimated, reused=tuned.reused, skipped=tuned.skipped,
               rejected=sum(r.get("status") == "rejected" for r in res.values()),
               rejections=list(tuned.rejected_now), pruned=sum(r.get("status") == "pruned" for r in res.values()),
               store=str(ctx["store"].path(spec.name, tgt.name, ctx["fp"], policy)))
    if not runnable:
        if winner:
            _estimate_row(row, tgt, spec, shape, dims, policy, entry, default_cfg)
        return row
    if winner:
        _time_row(row, prob, spec.launched(entry["winner_config"], dims, policy, tgt.caps), default_cfg, won,
                  ctx["repeat"])
        row["unsettled"] = sum((res[k].get("ratio_spread") or 0) > SPREAD_GOAL for k in tuned.fresh
                               if res.get(k, {}).get("status") == "ok" and not res[k].get("estimated")
                               and "same_as" not in res[k])
    return row


def _estimate_row(row: dict, tgt, spec: OpSpec, shape: dict, dims: dict, policy: str, entry: dict,
                  default_cfg: dict) -> None:
    """A cost-model row's estimates on this shape (a reused decision's stored one may be another
    shape's), and its ratio to the default's."""
    res, dk = entry["results"], row["default"]
    winner = spec.launched(entry["winner_config"], dims, policy, tgt.caps)
    est = _estimate_here(tgt, spec, shape, winner, policy)
    base = res.get(dk, {}).get("time_s") if row["kind"] != "reused" and res.get(dk, {}).get("status") == "ok" \
        else _estimate_here(tgt, spec, shape, default_cfg, policy)
    row["time_s"] = est if est is not None else row["time_s"]
    if base and row["time_s"]:
        row["vs_default"] = base / row["time_s"]


def _time_row(row: dict, prob, win_cfg: dict, default_cfg: dict, won: dict, repeat) -> None:
    """A measured row's times on this shape: against the default, then against torch's eager call."""
    winner, dk = row["winner"], row["default"]
    win_fn = lambda: prob.run(win_cfg)   # noqa: E731
    if row["kind"] == "measured" and won.get("ref") == dk and won.get("ratio"):
        row.update(best_s=won.get("best_s"), vs_default=1.0 / won["ratio"])
    elif win_cfg == default_cfg:   # a reused default: timed on this shape, 1x itself
        c = _checked_here(win_fn, repeat)
        if isinstance(c, str):
            row.update(time_s=None, untrusted=f"{winner} failed on this shape: {c}")
        else:
            row.update(time_s=c.m.seconds, best_s=c.m.best, spread=c.m.spread, vs_default=1.0, one_thread=c.one_thread)
    else:
        # a reused decision (its times may be another shape's with the same key dims), or one not
        # paired with the default: timed on this shape against the default, unstored, on one thread as
        # the tuner ranks
        with threads(1):
            c = _paired_here(win_fn, lambda: prob.run(default_cfg), repeat)
        if isinstance(c, str):
            row.update(time_s=None, untrusted=f"{winner} failed on this shape: {c}")
        else:
            row.update(time_s=c.m.a.seconds, best_s=c.m.a.best, spread=c.m.a.spread,
                       vs_default=1.0 / c.m.ratio_best, one_thread=c.one_thread)
            if c.why:
                row.update(untrusted=f"{winner} against the default on this shape: {c.why}")
    if prob.eager is not None and not row["untrusted"]:
        # in the caller's grad mode: a backward op's baseline runs torch's autograd (its inputs
        # alone require grad, so a forward baseline records nothing either way)
        c = _paired_here(win_fn, prob.eager, repeat)
        if isinstance(c, str):
            row.update(untrusted=f"torch's eager call failed: {c}")
        else:
            # the winner's time as the op runs it (on every thread), from the pairs with torch
            row.update(vs_torch=1.0 / c.m.ratio_best, vs_torch_median=1.0 / c.m.ratio, time_s=c.m.a.seconds,
                       best_s=c.m.a.best, one_thread=c.one_thread)
            if c.why:
                row.update(untrusted=f"against torch: {c.why}")


def tune_ops(ops=None, shapes=None, *, target="cpu", cache_dir=None, budget=None, policy="fast", spaces=None,
             repeat=3, progress=True, quick=False, out=None, force=False, verbose=False) -> list[dict]:
    """Tunes library `ops` (names; default: every op with shapes) on `shapes` ({op: [shape dicts]};
    default: the specs' own). Returns one summary row per (op, shape): op, shape, shape_key, winner,
    kind (measured, estimated, reused: the winner's result is from an earlier run, or no winner),
    time_s (the winner's median sample; an estimate when estimated), best_s (its fastest sample),
    spread, vs_default (t_default / t_winner: of the fastest of paired samples, or of estimates),
    vs_torch (t_eager / t_winner, the same way) and vs_torch_median (the median of the per-pair
    ratios), busy (other work held the cores: the winner was not checked on every thread),
    one_thread (time_s, best_s and vs_torch are from one thread: the parallel runs waited
    for busy cores), untrusted (why the row's ratios are not believed, else None),
    untrusted_configs (candidates timed but not believed, not stored), unsettled (configs timed in
    this run whose ratio spread stayed over SPREAD_GOAL), default, estimated, measured and
    estimated_now (configs run or estimated in this run), reused, rejected, rejections (config key,
    reason: found in this run), pruned, skipped, store (the decision file). Each trusted config's
    result is stored; `force` measures every candidate again instead of reusing stored results;
    `verbose` prints each rejection as it happens. `progress`: a line per shape on `out` (stderr),
    and on a terminal a line per candidate."""
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
    tty = progress and getattr(out, "isatty", lambda: False)()
    ctx = dict(policy=policy, runnable=runnable, spaces=spaces, fp=fingerprint_hash(tgt), out=out,
               store=DecisionStore(cache_dir), repeat=repeat, rejected=[], force=force,
               workers=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
               # a `\r` line per candidate only on a terminal; logs (CI, pipes, files) get a line per shape
               progress=tty)
    jobs = [(specs[op], sh) for op in ops for sh in shapes.get(op, [])]
    sizes = [len(_space(spec, tgt, ctx)) for spec, _ in jobs]
    rows = []
    if progress:
        how = "measuring on this machine" if runnable else "ranking by the target's cost model (estimates)"
        print(f"autotune {tgt.name}: {len(jobs)} shapes of {len({spec.name for spec, _ in jobs})} ops, "
              f"{sum(sizes)} candidates, {how}" + (f", budget {budget:g} s" if budget else ""), file=out, flush=True)
    with use_target(tgt), numerics(policy):
        for ji, (spec, shape) in enumerate(jobs):
            ctx["job"] = f"{ji + 1}/{len(jobs)}"
            # each job's share of what is left, by its number of candidates: one large space
            # cannot spend the budget of the ops after it (time it leaves unused rolls forward)
            ctx["deadline"] = None if end is None else (
                time.perf_counter() + max(0.0, end - time.perf_counter()) * sizes[ji] / max(1, sum(sizes[ji:])))
            n_rej, t0 = len(ctx["rejected"]), time.perf_counter()
            if progress and not tty:
                print(f"[{ctx['job']}] {spec.name} {spec.describe(shape)}: {sizes[ji]} candidates ...", file=out,
                      flush=True)
            rows.append(_tune_one(spec, shape, tgt, ctx))
            if progress:
                line = _done_line(ctx["job"], rows[-1], time.perf_counter() - t0)
                print(("\r" + line.ljust(100)) if tty else line, file=out, flush=True)
            for op, skey, ck, why in ctx["rejected"][n_rej:] if verbose else ():
                print(f"  rejected {op} {skey} {ck}: {why}", file=out, flush=True)
        if runnable:
            _recheck_outliers(rows, jobs, tgt, ctx)
    clear_memo()
    return rows


NEIGHBOUR_FACTOR = 3.0   # a shape with no more work than another, this much slower, is re-timed


def _work(spec: OpSpec, shape: dict, cfg: dict) -> float | None:
    """The op's work on `shape` (programs x (elements + flops) of its Work), for comparing rows."""
    try:
        w = spec.work(cfg, {**shape, **spec.dims_of(shape)})
        return float(w.programs * (w.elements + w.flops))
    except Exception:  # noqa: BLE001 - an op without a usable model is simply not compared
        return None


def _recheck_outliers(rows: list[dict], jobs: list, tgt, ctx: dict) -> None:
    """A row far from its neighbours (another shape of the same op with at least as much work ran
    NEIGHBOUR_FACTOR times faster) is timed again against the default; if it stays so, its
    figures are marked untrusted. Its stored decision stands: the candidates were compared in
    pairs, each checked against one thread."""
    from .timing import SLOW_BY  # noqa: PLC0415
    work = {}
    for i, ((spec, shape), r) in enumerate(zip(jobs, rows)):
        if r["winner"] and r.get("best_s") and not r.get("untrusted"):
            w = _work(spec, shape, spec.launched(r.get("winner_config") or {}, spec.dims_of(shape), ctx["policy"],
                                                 tgt.caps)) if r.get("winner_config") else None
            if w:
                work[i] = w
    for i, wi in work.items():
        faster = [j for j, wj in work.items() if j != i and rows[j]["op"] == rows[i]["op"] and wj >= wi
                  and rows[i]["best_s"] > NEIGHBOUR_FACTOR * rows[j]["best_s"] + SLOW_BY]
        if not faster:
            continue
        spec, shape = jobs[i]
        r, n = rows[i], rows[faster[0]]
        dims = spec.dims_of(shape)
        prob = spec.problem(shape)
        cfg = spec.launched(r["winner_config"], dims, ctx["policy"], tgt.caps)
        c = _checked_here(lambda: prob.run(cfg), ctx["repeat"])
        if not isinstance(c, str) and c.m.best <= NEIGHBOUR_FACTOR * n["best_s"] + SLOW_BY:
            r.update(time_s=c.m.seconds, best_s=c.m.best, one_thread=r["one_thread"] or c.one_thread)
            continue
        r["untrusted"] = (f"{r['best_s'] * 1e3:.3g} ms at best, timed again, where {n['shape']} (as much work or "
                          f"more) took {n['best_s'] * 1e3:.3g} ms")


def _done_line(job: str, r: dict, seconds: float) -> str:
    """One shape's outcome, for the progress log."""
    what = f"{r['kind']} {r['winner']}" if r["winner"] else r["kind"]
    new = r["measured"] + r.get("estimated_now", 0)
    alone = ", not checked on every thread: other work held the cores" if r.get("busy") else ""
    return f"[{job}] {r['op']} {r['shape_key']}: {what} ({new} new, {r['reused']} reused{alone}) in {seconds:.1f} s"
