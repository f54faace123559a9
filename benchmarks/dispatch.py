"""Warm dispatch overhead of `@kernel`: a no-op kernel launched through `kfn[grid](...)` against
the loaded ctypes entry called directly (`ck.launcher.entry(g0, g1, g2, ptr, n)`).

    python -m benchmarks.dispatch [--calls N] [--repeat R]

Each figure is the median over R repeats of N back-to-back calls. Goal: overhead <= 5 us/call.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from compiler import kernel, language as tl  # noqa: E402
from compiler.clihelp import description  # noqa: E402

GOAL_US = 5.0


@kernel
def noop(x_ptr, n):
    pass


def _per_call_us(fn, calls: int, repeat: int) -> float:
    fn()  # warm
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--calls", type=int, default=20000, help="calls per repeat (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="repeats; the median is reported (default 7)")
    args = ap.parse_args(argv)

    x = torch.zeros(16)
    n = 1000  # not 1 and not a multiple of 16: an ordinary runtime int
    ck = noop[(1,)](x, n)  # compile (or load from the cache) once
    entry, launcher, ptr = ck.launcher.entry, ck.launcher, x.data_ptr()
    grid, fargs = (1,), (x, n)
    launch = noop[grid]  # the `kfn[grid]` object, hoisted
    rows = [
        ("ctypes entry(1,1,1, ptr, n)", lambda: entry(1, 1, 1, ptr, n)),
        ("ck.launcher((1,), args)", lambda: launcher(grid, fargs)),
        ("noop[grid](x, n), hoisted", lambda: launch(x, n)),
        ("noop[(1,)](x, n)", lambda: noop[(1,)](x, n)),
        ("noop[lambda m: (1,)](x, n)", lambda: noop[lambda m: (1,)](x, n)),
    ]
    results = [(name, _per_call_us(fn, args.calls, args.repeat)) for name, fn in rows]
    base = results[0][1]
    w = max(len(r[0]) for r in results)
    print(f"warm dispatch, no-op kernel, median of {args.repeat} x {args.calls} calls")
    print(f"{'path':<{w}}  {'us/call':>8}  {'overhead us':>11}")
    for name, us in results:
        print(f"{name:<{w}}  {us:8.2f}  {us - base:11.2f}")
    over = results[3][1] - base
    print(f"@kernel overhead (noop[(1,)](x, n) - ctypes): {over:.2f} us/call, goal <= {GOAL_US:.0f} us: "
          f"{'met' if over <= GOAL_US else 'NOT met'}")


if __name__ == "__main__":
    main()
