"""Pre-building a kernel cache for a target this machine can neither run nor estimate (e.g.
`gpu:sm_90` without a GPU): every op of the shapes is called with its default config under
`compiler.compile_only()`, so each kernel it launches is compiled into the cache and nothing
runs. No decision is stored: on the device the defaults (or a later tuning there) apply."""
from __future__ import annotations

import time

from ..opspec import library_ops


def prebuild(ops, shapes, target, policy: str = "fast", out=None) -> list[dict]:
    """One row per (op, shape): op, shape_key, config, kernels (cache keys), built (how many were
    compiled rather than found in the cache), seconds. `out`: a line per shape as it is done."""
    from .. import compile_only, numerics, use_target  # noqa: PLC0415
    from ..cache import STATS  # noqa: PLC0415

    specs = library_ops()
    rows = []
    with use_target(target), numerics(policy):
        for op in ops or list(shapes):
            spec = specs[op]
            for shape in shapes.get(op, []):
                dims = spec.dims_of(shape)
                cfg = spec.launched(spec.default_config(target.caps, dims), dims, policy, target.caps)
                t0, builds0 = time.perf_counter(), STATS.builds
                with compile_only() as built:
                    spec.problem(shape).run(cfg)
                rows.append({"op": op, "shape_key": spec.shape_key(**dims), "config": cfg,
                             "kernels": [ck.key[:12] for ck in built], "built": STATS.builds - builds0,
                             "seconds": time.perf_counter() - t0})
                if out is not None:
                    r = rows[-1]
                    print(f"[{len(rows)}] {op} {r['shape_key']}: {len(r['kernels'])} kernels, {r['built']} built, "
                          f"{r['seconds']:.1f} s", file=out, flush=True)
    return rows


def format_prebuild(rows: list[dict], target_name: str) -> str:
    lines = [f"pre-built for {target_name} (default configs, compiled into the cache, nothing run):",
             f"{'op':14} {'shape':24} {'config':40} {'cache keys':28} {'built':>5} {'s':>6}"]
    for r in rows:
        cfg = ",".join(f"{k}={v}" for k, v in sorted(r["config"].items()))
        lines.append(f"{r['op']:14} {r['shape_key']:24} {cfg:40} {' '.join(r['kernels']):28} {r['built']:5d} {r['seconds']:6.2f}")
    return "\n".join(lines)
