"""`python -m compiler.autotune` tunes the library kernels' block sizes on a target and stores the
decisions in the kernel cache directory, where the library ops find them.

    python -m compiler.autotune --target cpu [--arch ARCH] [--kernels matmul,rms_norm] [--shapes FILE]
        [--cache-dir DIR] [--budget SECONDS] [--policy fast] [--quick] [--force] [-v]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..clihelp import description


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.autotune", description=description(__doc__))
    ap.add_argument("--target", default="cpu", help="target name, e.g. cpu (measured) or another target with "
                                                    "a cost model (estimated)")
    ap.add_argument("--arch", default=None, help="the target's variant: --target kunlun --arch xpu2 is "
                                                 "kunlun:xpu2, --target gpu --arch sm_90 is gpu:sm_90")
    ap.add_argument("--kernels", default="", help="comma-separated ops (default: every op with shapes)")
    ap.add_argument("--shapes", default=None,
                    help="a JSON shapes file {\"shapes\": {op: [...]}} (default: each op's own serving shapes)")
    ap.add_argument("--cache-dir", default=None, help="kernel cache root (default: TILEJIT_CACHE_DIR or ~/.cache/tilejit)")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds of tuning; configs left unmeasured are "
                                                                "reported as skipped (default 150)")
    ap.add_argument("--policy", default="fast", choices=("fast", "strict"), help="numerics policy (default fast)")
    ap.add_argument("--quick", action="store_true", help="1-2 tiny shapes per op (the shapes file's 'quick' set): a "
                                                         "check that tuning works here, in seconds; no model runs "
                                                         "those shapes, so its decisions serve none")
    ap.add_argument("--repeat", type=int, default=3, help="paired samples per config, at least (more until the "
                                                          "ratio of the fastest samples settles)")
    ap.add_argument("--force", action="store_true", help="measure every candidate of the selected ops and shapes "
                                                         "again instead of reusing stored results")
    ap.add_argument("-v", "--verbose", action="store_true", help="list each rejected config with its reason")
    args = ap.parse_args(argv)

    from compiler import get_target  # noqa: PLC0415
    from compiler.cache import CacheError  # noqa: PLC0415

    from . import AutotuneError, format_summary, load_shapes, tune_ops  # noqa: PLC0415
    from .prebuild import format_prebuild, prebuild  # noqa: PLC0415

    spec = f"{args.target}:{args.arch}" if args.arch and ":" not in args.target else args.target
    try:
        target = get_target(spec)
    except Exception as exc:  # noqa: BLE001
        print(f"autotune: unknown or unavailable target {spec!r}: {exc}", file=sys.stderr)
        return 2
    ops = [k.strip() for k in args.kernels.split(",") if k.strip()] or None
    t0 = time.perf_counter()
    if args.cache_dir:
        os.environ["TILEJIT_CACHE_DIR"] = args.cache_dir
    if not target.caps.measurable and not target.has_cost_model:
        # nothing to rank by: compile the defaults so the cache ships ready for the device
        try:
            rows = prebuild(ops, load_shapes(args.shapes, quick=args.quick), target, args.policy, out=sys.stderr)
        except Exception as exc:  # noqa: BLE001
            print(f"autotune: pre-building for {target.name} failed: {exc}", file=sys.stderr)
            return 2
        print(format_prebuild(rows, target.name))
        print(f"elapsed {time.perf_counter() - t0:.1f} s")
        return 0
    try:
        rows = tune_ops(ops, load_shapes(args.shapes, quick=args.quick), target=target, cache_dir=args.cache_dir,
                    budget=args.budget, policy=args.policy, repeat=args.repeat, force=args.force,
                    verbose=args.verbose)
    except (AutotuneError, CacheError) as exc:
        print(f"autotune: {exc}", file=sys.stderr)
        return 2
    print(format_summary(rows, target.name, verbose=args.verbose))
    print(f"elapsed {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
