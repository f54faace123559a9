"""Autotuner of the library kernels: ``python -m compiler.autotune --target cpu``.

For each op and shape: candidates are the op's config space (``kernels.CONFIGS[op]``, or a given
space) minus configs that config_for would clamp for this shape ("pruned") and configs the target
cannot compile (a ``CompilationError``, e.g. the cpu target's 4 MiB tile limit: "rejected" with its
message); every remaining candidate is checked against the op's fp64 reference (a mismatch is
"rejected" with the error) and then timed (median of ``repeat`` samples). Per-config results and the
winner are stored in ``<cache root>/autotune/`` (see ``store``); configs whose result is already
stored for this (op, target fingerprint, policy, shape key) are not measured again.

Where the target cannot run here (not cpu), candidates are ranked by ``target.estimate(op,
config, shape)`` when the target has it (each decision labelled "estimated"); otherwise tuning
stops with an error (no faked measurements).
"""
from __future__ import annotations

import math
import statistics
import sys
import time

from . import shapes as S
from .store import DecisionStore, clear_memo, config_key, fingerprint_hash, lookup, result

__all__ = ["tune", "AutotuneError", "lookup", "DecisionStore", "format_summary"]


class AutotuneError(Exception):
    pass


MEASURE_COUNT = {"n": 0}   # configs measured (checked + timed) in this process; tests count with it


def _target_space(tgt, op: str) -> list[dict]:
    """The op's config space, narrowed by the target when it has its own (kunlun: LM-sized tiles)."""
    import kernels  # noqa: PLC0415 - the library imports the compiler
    own = getattr(tgt, "config_space", None)
    return own(op, kernels.CONFIGS[op]) if own else kernels.CONFIGS[op]


def _time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(3):   # the fastest of 3 sizes a sample: one call delayed by the scheduler must not
        t0 = time.perf_counter()   # shrink every sample to a single call
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


def _can_run_here(target) -> bool:
    return target.name.split(":")[0] == "cpu"


def tune(ops=None, shapes=None, *, target="cpu", cache_dir=None, budget=None, policy="fast", spaces=None,
         repeat=3, progress=True, quick=False, out=None) -> list[dict]:
    """Tune ``ops`` on ``shapes`` ({op: [shape dicts]}; default: the default shapes file). Returns one
    row per (op, shape): op, shape, shape_key, winner, time_s, default_time_s, eager_time_s,
    estimated, measured, reused, rejected, pruned, skipped."""
    import torch  # noqa: PLC0415

    import kernels  # noqa: PLC0415
    from compiler import get_target, use_target  # noqa: PLC0415
    from compiler.errors import TilejitError  # noqa: PLC0415
    from compiler.numerics import numerics, validate_policy  # noqa: PLC0415
    from kernels import _common  # noqa: PLC0415

    out = out if out is not None else sys.stderr
    # a `\r` progress line only makes sense on a terminal; in logs (CI, pipes) it is noise
    progress = progress and getattr(out, "isatty", lambda: False)()
    policy = validate_policy(policy)
    tgt = get_target(target) if isinstance(target, str) else target
    runnable = _can_run_here(tgt)
    if not runnable and not callable(getattr(tgt, "estimate", None)):
        raise AutotuneError(
            f"target {tgt.name!r} cannot run kernels on this machine and has no cost model "
            f"(no estimate(op, config, shape) method), so there is nothing to rank candidates by; "
            f"run the autotuner on a machine with this target (measurements are never faked)")
    shapes = shapes if shapes is not None else S.load_shapes(None, quick=quick)
    ops = list(ops) if ops else [op for op in S.OPS if op in shapes]
    for op in ops:
        if op not in S.OPS:
            raise AutotuneError(f"unknown kernel {op!r}; choose from {', '.join(S.OPS)}")
    store = DecisionStore(cache_dir)
    fp = fingerprint_hash(tgt)
    deadline = time.perf_counter() + budget if budget else None
    jobs = [(op, sh) for op in ops for sh in shapes.get(op, [])]
    rows = []
    with use_target(tgt), numerics(policy), _common.tuned_decisions(False):
        for ji, (op, shape) in enumerate(jobs):
            dims = S.problem_dims(op, shape)
            skey = S.shape_key(op, **dims)
            space = [dict(c) for c in (spaces or {}).get(op) or _target_space(tgt, op)]
            space_keys = {config_key(c) for c in space}
            known = store.results(op, tgt.name, fp, policy, skey)
            default_cfg = kernels.config_for(op, tgt, **dims)
            prob = S.Problem(op, shape) if runnable else None
            ref = prob.ref() if runnable else None
            new, done_eff = {}, {}
            counts = dict(measured=0, reused=0, skipped=0)
            for ci, cfg in enumerate(space):
                ck = config_key(cfg)
                if progress:
                    print(f"\r[{ji + 1}/{len(jobs)}] {op} {skey}  config {ci + 1}/{len(space)} {ck:<40}",
                          end="", file=out, flush=True)
                if ck in known:
                    counts["reused"] += 1
                    continue
                if deadline is not None and time.perf_counter() > deadline:
                    counts["skipped"] += 1
                    continue
                eff, why = S.effective(op, cfg, {**shape, **dims})
                if why:
                    new[ck] = result(cfg, "pruned", reason=why)
                    continue
                ek = config_key(eff)
                if ek in done_eff:   # same launch as an earlier candidate (e.g. BLOCK_M clamped by seq_q)
                    new[ck] = {**done_eff[ek], "config": dict(cfg), "effective": eff, "same_as": done_eff[ek]["key"]}
                    continue
                if not runnable:
                    try:
                        est = float(tgt.estimate(op, eff, dict(shape)))
                        r = result(cfg, "ok", time_s=est, estimated=True, effective=eff)
                    except Exception as exc:  # noqa: BLE001
                        r = result(cfg, "rejected", reason=f"{type(exc).__name__}: {exc}", estimated=True)
                else:
                    MEASURE_COUNT["n"] += 1
                    counts["measured"] += 1
                    try:
                        outp = prob.run(eff)
                        bad = prob.check(outp, ref)
                        if bad:
                            r = result(cfg, "rejected", reason=bad, effective=eff)
                        else:
                            r = result(cfg, "ok", time_s=_time(lambda e=eff: prob.run(e), repeat), effective=eff)
                    except (TilejitError, ValueError, RuntimeError) as exc:
                        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                        r = result(cfg, "rejected", reason=f"{type(exc).__name__}: {msg}", effective=eff)
                if r["status"] == "rejected":
                    print(f"\n  rejected {op} {skey} {ck}: {r['reason']}", file=out, flush=True)
                done_eff[ek] = {**{k: v for k, v in r.items() if k != "config"}, "key": ck}
                new[ck] = r
            entry = store.record(op, tgt.name, fp, policy, skey, S.key_dims(op, **dims), new, space_keys)
            res = entry["results"]
            dk = config_key(default_cfg)
            default_t = res.get(dk, {}).get("time_s") if res.get(dk, {}).get("status") == "ok" else None
            if default_t is None and runnable and entry.get("winner"):
                try:   # the default config is not in the space (e.g. clamped): time it, unstored
                    default_t = _time(lambda: prob.run(default_cfg), repeat)
                except Exception:  # noqa: BLE001
                    default_t = None
            eager_t = None
            if runnable and prob.eager is not None and entry.get("winner"):
                with torch.no_grad():
                    eager_t = _time(prob.eager, repeat)
            rows.append(dict(op=op, shape=S.describe(op, shape), shape_key=skey, winner=entry.get("winner"),
                             time_s=entry.get("winner_time_s"), default=dk, default_time_s=default_t,
                             eager_time_s=eager_t, estimated=bool(entry.get("estimated")), **counts,
                             rejected=sum(r.get("status") == "rejected" for r in res.values()),
                             pruned=sum(r.get("status") == "pruned" for r in res.values())))
    if progress:
        print("\r" + " " * 100 + "\r", end="", file=out, flush=True)
    clear_memo()
    return rows


def _ms(t):
    if t is None:
        return "-"
    return f"{t * 1e3:.3f}" if t < 1e-2 else f"{t * 1e3:.1f}"


def format_summary(rows: list[dict], target_name: str) -> str:
    hdr = ("op", "shape", "shape key", "winner", "time ms", "vs default", "vs torch", "kind",
           "measured", "reused", "rejected", "pruned", "skipped")
    cells = []
    for r in rows:
        t = r["time_s"]
        vd = f"{r['default_time_s'] / t:.2f}x" if t and r["default_time_s"] and not r["estimated"] else "-"
        ve = f"{r['eager_time_s'] / t:.2f}x" if t and r["eager_time_s"] and not r["estimated"] else "-"
        kind = "estimated" if r["estimated"] else ("measured" if r["winner"] else "no winner")
        tm = _ms(t) if not r["estimated"] else (f"~{t * 1e3:.3g} (est.)" if t is not None else "-")
        cells.append((r["op"], r["shape"], r["shape_key"], r["winner"] or "-", tm, vd, ve, kind,
                      str(r["measured"]), str(r["reused"]), str(r["rejected"]), str(r["pruned"]), str(r["skipped"])))
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(hdr)]
    lines = [f"autotune summary (target {target_name})",
             "  ".join(h.ljust(w) for h, w in zip(hdr, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines.append("vs default = t(default config) / t(winner); vs torch = t(torch eager) / t(winner): > 1x means "
                 "the winner is faster. skipped = not measured within --budget (a rerun measures them).")
    return "\n".join(lines)
