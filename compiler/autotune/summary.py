"""The autotuner's summary table, and the lines under it: what was rejected (counted; listed with
`-v`), and where the decisions are stored."""
from __future__ import annotations

import collections
import os
import re

from ..cache.decisions import MIN_GAIN
from .tuner import MAX_SAMPLES, SPREAD_GOAL


def _ms(t):
    if t is None:
        return "-"
    return f"{t * 1e3:.3f}" if t < 1e-2 else f"{t * 1e3:.1f}"


def _kind(r: dict) -> str:
    if "kind" in r:
        return r["kind"]
    return "estimated" if r["estimated"] else ("measured" if r["winner"] else "no winner")


def _cells(r: dict) -> tuple:
    t = r["time_s"]
    vd = f"{r['default_time_s'] / t:.2f}x" if t and r["default_time_s"] and not r["estimated"] else "-"
    ve = f"{r['eager_time_s'] / t:.2f}x" if t and r["eager_time_s"] and not r["estimated"] else "-"
    tm = _ms(t) if not r["estimated"] else (f"~{t * 1e3:.3g} (est.)" if t is not None else "-")
    sp = f"{r['spread'] * 100:.0f}%" if r.get("spread") is not None else "-"
    new = r["measured"] + r.get("estimated_now", 0)
    return (r["op"], r["shape"], r["shape_key"], r["winner"] or "-", tm, sp, vd, ve, _kind(r), str(new),
            str(r["reused"]), str(r["rejected"]), str(r["pruned"]), str(r["skipped"]))


def _why(reason: str) -> str:
    """The kind of a rejection: the exception's name, or the check's message."""
    head = (reason or "?").split(":", 1)[0].strip()
    return head if re.fullmatch(r"[A-Za-z_]\w*", head) else (reason or "?")[:60]


def rejection_lines(rows: list[dict], listed: bool = False) -> list[str]:
    """How many configs were rejected in this run, per op and reason (never one line per config)."""
    counts: dict[str, collections.Counter] = {}
    for r in rows:
        for _ck, why in r.get("rejections", ()):
            counts.setdefault(r["op"], collections.Counter())[_why(why)] += 1
    total = sum(sum(c.values()) for c in counts.values())
    if not total:
        return []
    per = "; ".join(f"{op}: " + ", ".join(f"{n} {why}" for why, n in c.most_common()) for op, c in counts.items())
    return [f"rejected in this run: {total} config(s) ({per}); "
            + ("each is listed above" if listed else "`-v` lists each with its reason")]


def store_lines(rows: list[dict]) -> list[str]:
    files = sorted({r["store"] for r in rows if r.get("store")})
    if not files:
        return []
    where = os.path.dirname(files[0])
    return [f"decisions stored in {where}/ ({len(files)} file(s) <op>.<target>.<fingerprint>.<policy>.json, "
            f"e.g. {os.path.basename(files[0])})",
            "the library ops use them from now on; `python -m compiler.cache clear` removes them with the kernels"]


def format_summary(rows: list[dict], target_name: str, verbose: bool = False) -> str:
    """The table, the rejection counts (`verbose`: the rejections were listed above) and the store."""
    hdr = ("op", "shape", "shape key", "winner", "time ms", "spread", "vs default", "vs torch", "kind",
           "new", "reused", "rejected", "pruned", "skipped")
    cells = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(hdr)]
    lines = [f"autotune summary (target {target_name})",
             "  ".join(h.ljust(w) for h, w in zip(hdr, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.append("spread = (q3 - q1) / median of the winner's timed samples (more samples are taken, up to "
                 f"{MAX_SAMPLES}, while it is over {SPREAD_GOAL:.0%}). A candidate replaces the default only when "
                 f"faster by more than both timings' spread (at least {MIN_GAIN:.0%}). "
                 "vs default = t(default config) / t(winner); "
                 "vs torch = t(torch eager) / t(winner): > 1x means the winner is faster. kind: measured or "
                 "estimated (by the target's cost model) in this run, or reused: the decision of an earlier run or "
                 "of an earlier shape with the same shape key (configs follow the key dims only), timed again "
                 "on this shape; --force measures every candidate again. new = configs checked and timed (or "
                 "estimated) in this run, reused = results taken from the store, skipped = not measured within "
                 "--budget (each shape gets a share of it by its number of candidates, and its first candidate, "
                 "the default, is measured regardless; a rerun measures the rest).")
    return "\n".join(lines + unsettled_lines(rows) + rejection_lines(rows, verbose) + store_lines(rows))


def unsettled_lines(rows: list[dict]) -> list[str]:
    """A warning when timings of this run never settled: their ranking is not to be trusted."""
    n = sum(r.get("unsettled", 0) for r in rows)
    if not n:
        return []
    where = ", ".join(sorted({f"{r['op']} {r['shape_key']}" for r in rows if r.get("unsettled")}))
    return [f"not settled: {n} timing(s) kept a spread over {SPREAD_GOAL:.0%} after {MAX_SAMPLES} samples ({where}); "
            "the machine was busy, so those winners may not hold: rerun with --force when it is quiet"]
