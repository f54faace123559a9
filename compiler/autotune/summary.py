"""The autotuner's summary table."""
from __future__ import annotations


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
