"""The autotuner's summary table, and the lines under it: what was rejected (counted; listed with
`-v`), which rows could not be trusted, and where the decisions are stored. A target ranked by
its cost model gets a table of its own: estimates in their own columns, and a footer about the
model, not about timings."""
from __future__ import annotations

import collections
import os
import re

from ..cache.decisions import MIN_GAIN
from .timing import MAX_SAMPLES, SPREAD_GOAL, UNSETTLED, far_apart


def _ms(t):
    if t is None:
        return "-"
    return f"{t * 1e3:.3f}" if t < 1e-2 else f"{t * 1e3:.1f}"


def _ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def _counts(r: dict) -> tuple:
    new = r["measured"] + r.get("estimated_now", 0)
    return (r["kind"], str(new), str(r["reused"]), str(r["rejected"]), str(r["pruned"]), str(r["skipped"]))


def _measured_cells(r: dict) -> tuple:
    doubt = "?" if r.get("untrusted") else ""
    threads = " (1t)" if r.get("one_thread") else ""
    best, median = r.get("vs_torch"), r.get("vs_torch_median")
    off = "~" if best and median and far_apart(best, median) and not doubt else ""
    return (r["op"], r["shape"], r["shape_key"], r["winner"] or "-", _ms(r["time_s"]) + threads, _ms(r.get("best_s")),
            _ratio(r.get("vs_default")) + doubt, _ratio(best) + doubt, _ratio(median) + doubt + off, *_counts(r))


def _estimated_cells(r: dict) -> tuple:
    return (r["op"], r["shape"], r["shape_key"], r["winner"] or "-", _ms(r["time_s"]), _ratio(r.get("vs_default")),
            *_counts(r))


_COUNTS = ("kind", "new", "reused", "rejected", "pruned", "skipped")
MEASURED = (("op", "shape", "shape key", "winner", "time ms", "best ms", "vs default", "vs torch", "(median)")
            + _COUNTS,
            _measured_cells)
ESTIMATED = (("op", "shape", "shape key", "winner", "est. ms", "est. vs default") + _COUNTS, _estimated_cells)

MEASURED_LEGEND = (
    "time ms = the winner's median sample, best ms = its fastest. vs default = t(default config) / t(winner) on "
    "one thread, where the candidates are ranked (a winner is also timed against the default on every thread, "
    "and dropped if slower there, unless other work held the cores), and vs torch = t(torch eager) / t(winner) "
    "on every thread, from samples of the two sides taken in turn (other load meets both): "
    "the ratio of their fastest samples, taken until the odd and the even pairs agree on it within "
    f"{SPREAD_GOAL:.0%} (up to {MAX_SAMPLES} pairs); (median) = the median of the per-pair ratios, ~ where it is "
    "over 2x off the fastest samples' (busy spells, not the kernels, set it). > 1x means the "
    "winner is faster. A candidate replaces the default only when faster by more than that agreement (at least "
    f"{MIN_GAIN:.0%}) and its median agrees. Every timing is checked against a run on one thread and re-timed when "
    "implausible; where the parallel runs kept waiting for busy cores, both sides were timed on one thread "
    f"(1t); a candidate whose odd and even pairs still disagree by more than {UNSETTLED:.0%} is not stored, and a row's "
    "ratio that does so is marked ?. "
    "kind: measured in this run, or reused: the decision of an earlier run or of an earlier shape with the same "
    "shape key (configs follow the key dims only), timed again on this shape; --force measures every candidate "
    "again. new = configs checked and timed in this run, reused = results taken from the store, skipped = not "
    "measured within --budget (each shape gets a share of it by its number of candidates, and its first "
    "candidate, the default, is measured regardless; a rerun measures the rest).")
ESTIMATED_LEGEND = (
    "Estimates, not measurements: nothing ran. est. ms = the target's cost model's figure for one call of the "
    "winner; est. vs default = estimate(default config) / estimate(winner). The model ranks the candidates "
    "(each must also fit the target's memory, or it is rejected); it is not a prediction to quote as a speed. "
    "kind: estimated in this run, or reused from the store; new = configs estimated in this run.")


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
    """The table, the untrusted rows, the rejection counts (`verbose`: the rejections were listed
    above) and the store."""
    estimated = bool(rows) and all(r.get("estimated") or r.get("estimated_now") for r in rows if r["winner"])
    (hdr, cells_of), legend = (ESTIMATED, ESTIMATED_LEGEND) if estimated else (MEASURED, MEASURED_LEGEND)
    cells = [cells_of(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(hdr)]
    title = f"autotune summary (target {target_name})" + (": cost-model estimates" if estimated else "")
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(hdr, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.append(legend)
    return "\n".join(lines + untrusted_lines(rows) + unsettled_lines(rows) + rejection_lines(rows, verbose)
                     + store_lines(rows))


def untrusted_lines(rows: list[dict]) -> list[str]:
    """The rows (and candidates) whose timings were not believed, and why: nothing of them was stored."""
    out = []
    for r in rows:
        if r.get("untrusted"):
            out.append(f"untrusted: {r['op']} {r['shape_key']}: {r['untrusted']} (the ratios marked ?; its decision "
                       "stands)")
    n = sum(r.get("untrusted_configs", 0) for r in rows)
    if n:
        out.append(f"untrusted: {n} candidate(s) not stored: a timing that stayed implausible after re-timing, or a "
                   "gain over the default that did not show again in new pairs; the next run measures them again")
    if out:
        out.append("the machine was busy: rerun when it is quiet (`--force` re-measures everything)")
    return out


def unsettled_lines(rows: list[dict]) -> list[str]:
    """A warning when timings of this run never settled: their ranking is not to be trusted."""
    n = sum(r.get("unsettled", 0) for r in rows)
    if not n:
        return []
    where = ", ".join(sorted({f"{r['op']} {r['shape_key']}" for r in rows if r.get("unsettled")}))
    return [f"not settled: {n} ratio(s) of this run kept a spread over {SPREAD_GOAL:.0%} after {MAX_SAMPLES} pairs "
            f"({where}); the machine was busy, so those winners may not hold: rerun with --force when it is quiet"]
