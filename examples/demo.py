"""The example kernels' demo: compile and run every example kernel on the current target, check it
against torch, and print kernel, shape, max error, compile time and run time relative to torch.

    python -m examples.demo [--repeat N]

Run times come from samples of tilejit and torch taken in turn (compiler/autotune/timing.py): the
fastest samples' ratio, and the median of the per-pair ratios beside it; where the parallel runs
waited for busy cores (a loaded machine), both sides are timed on one thread, marked (1t).
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from compiler import current_target  # noqa: E402
from compiler.autotune.timing import checked, far_apart, measure_pair  # noqa: E402
from compiler.cache import STATS  # noqa: E402
from compiler.clihelp import line_buffered  # noqa: E402
from examples.example_kernels import EXAMPLES, tolerance  # noqa: E402


def _max_err(out, ref) -> float:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    return max((o.double() - r.double()).abs().max().item() if o.numel() else 0.0 for o, r in zip(outs, refs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="paired samples of tilejit and torch per kernel and shape "
                                                          "(at least; more until their fastest agree)")
    args = ap.parse_args(argv)
    line_buffered()
    target = current_target()
    print(f"tilejit demo on target '{target.name}' ({torch.get_num_threads()} threads)\n")
    head = f"{'kernel':<18} {'shape':<16} {'dtype':<9} {'max err':>9} {'compile s':>10} {'run ms':>8} " \
           f"{'torch ms':>9} {'speed vs torch':>15} {'(median)':>9}  check"
    print(head)
    print("-" * len(head))
    failures = doubts = 0
    for name, wrapper, reference, make_inputs, shapes in EXAMPLES:
        for shape in shapes:
            inputs = make_inputs(shape)
            builds0 = STATS.builds
            t0 = time.perf_counter()
            out = wrapper(*inputs)
            first = time.perf_counter() - t0
            ref = reference(*inputs)
            err = _max_err(out, ref)
            try:
                outs = out if isinstance(out, (tuple, list)) else (out,)
                refs = ref if isinstance(ref, (tuple, list)) else (ref,)
                for o, r in zip(outs, refs):
                    torch.testing.assert_close(o, r, **tolerance(name, o))
                check = "ok"
            except AssertionError:
                check = "MISMATCH"
                failures += 1
            tj, base = (lambda: wrapper(*inputs)), (lambda: reference(*inputs))
            c = checked(lambda: measure_pair(tj, base, args.repeat), (tj, base))
            compiled = STATS.builds > builds0
            compile_s = f"{max(first - c.m.a.best, 0.0):.2f}" + ("" if compiled else "*")
            dtype = str(next(x.dtype for x in inputs if isinstance(x, torch.Tensor))).replace("torch.", "")
            mark = "?" if c.why else " (1t)" if c.one_thread else ""
            off = "~" if far_apart(c.m.ratio, c.m.ratio_best) else " "
            doubts += bool(c.why)
            print(f"{name:<18} {'x'.join(map(str, shape)):<16} {dtype:<9} {err:>9.2e} {compile_s:>10} "
                  f"{c.m.a.best * 1e3:>8.3f} {c.m.b.best * 1e3:>9.3f} {1 / c.m.ratio_best:>14.2f}x "
                  f"{1 / c.m.ratio:>7.2f}x{off}  {check}{mark}")
    print("\n* = loaded from the kernel cache, no compiler run. run ms / torch ms: the fastest sample of each "
          "(samples taken in turn); speed vs torch = their ratio, (median) = the median of the per-pair ratios, ~ "
          "where it is over 2x off (busy spells, not the kernels, set it): > 1 means tilejit is faster. (1t): the "
          "parallel runs waited for busy cores, so both sides were timed on one thread.")
    if doubts:
        print(f"?: {doubts} row(s) whose fastest samples did not settle even on one thread: the machine is too busy "
              "for those ratios")
    print(f"cache: {STATS.as_dict()}")
    if failures:
        print(f"{failures} result(s) did not match torch", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
