"""Warm host overhead of a launch, as ratios measured in one process:

- a 16-element `add` through `add[grid](...)` against `torch.add(x, y, out=o)` (goal: <= 2x);
- a no-op kernel through `noop[grid](x, n)` against its launcher called directly
  (`ck.launcher(grid, args)`) and against the kernel's entry called with converted values
  (`launcher.raw(...)` on the compiled launch path, the ctypes entry otherwise);
- one library call, `kernels.rms_norm` on a [1, 64] tensor, against the raw launch of the kernel
  it runs (goal: <= 5 us of overhead before any work).

    python -m benchmarks.dispatch [--calls N] [--repeat R]

Samples of the compared rows are interleaved (A, B, A, B, ...) and each figure is the median over
R repeats of N calls, so a load change on the machine moves both sides alike. The first line says
whether the compiled launch path (compiler.fastpath) is in use; TILEJIT_FAST_LAUNCH=0 measures
the Python path.
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

import kernels  # noqa: E402
from compiler import fastpath, kernel, language as tl  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402
from kernels.norm import rms_norm_kernel  # noqa: E402

ADD_GOAL, LIB_GOAL_US = 2.0, 5.0


@kernel
def noop(x_ptr, n):
    pass


@kernel
def add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _interleaved(fns, calls: int, repeat: int) -> list[float]:
    """Median us per call of each fn, samples taken in turn."""
    for f in fns:
        f()
    samples = [[] for _ in fns]
    for _ in range(repeat):
        for k, f in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            samples[k].append((time.perf_counter() - t0) / calls * 1e6)
    return [statistics.median(s) for s in samples]


def _raw(launcher, grid, args):
    """The kernel's entry with values already converted: the floor of any launch path."""
    if hasattr(launcher, "raw"):
        prep = launcher.owner.prepare(grid, args)
        return lambda: launcher.raw(*prep)
    from targets.cpu.launcher import Status  # noqa: PLC0415 - the ctypes path
    g0, g1, g2, values, _ = launcher.prepare(grid, args)
    st, entry = Status(), launcher.entry
    return lambda: entry(st, g0, g1, g2, *values)


def add_vs_torch(calls: int, repeat: int) -> tuple[float, float]:
    """(us per warm `add[(1,)](...)` of 16 elements, us per `torch.add(x, y, out=o)`)."""
    x, y, o = torch.randn(16), torch.randn(16), torch.empty(16)
    add[(1,)](x, y, o, 16, BLOCK=16)
    t_torch, t_add = _interleaved([lambda: torch.add(x, y, out=o), lambda: add[(1,)](x, y, o, 16, BLOCK=16)],
                                  calls, repeat)
    return t_add, t_torch


def library_call(calls: int, repeat: int) -> tuple[float, float]:
    """(us per `kernels.rms_norm` on [1, 64], us per raw launch of the kernel it runs)."""
    xr, w, yr = torch.randn(1, 64), torch.randn(64), torch.empty(1, 64)
    cfg = kernels.config_for("rms_norm", N=64)
    lib, raw = _interleaved([
        lambda: kernels.rms_norm(xr, w),
        lambda: rms_norm_kernel[(1,)](xr, None, w, yr, None, 64, 64, 1, 0, 0, 64, 1e-6, HAS_R=False, HAS_W=True,
                                      **cfg)], calls, repeat)
    return lib, raw


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--calls", type=int, default=5000, help="calls per sample (default 5000)")
    ap.add_argument("--repeat", type=int, default=9, help="samples per row; the median is reported (default 9)")
    a = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed

    x = torch.randn(16)
    ck = noop[(1,)](x, 1000)   # n: not 1 and not a multiple of 16, an ordinary runtime int
    mode = "compiled (C)" if fastpath.fast_module() is not None else f"Python ({fastpath.why()})"
    print(f"launch path: {mode}; median of {a.repeat} x {a.calls} calls, interleaved")

    t_add, t_torch = add_vs_torch(a.calls, a.repeat)
    print(f"{'torch.add(x, y, out=o), 16 elements':<44} {t_torch:8.2f} us")
    print(f"{'add[(1,)](x, y, o, 16, BLOCK=16)':<44} {t_add:8.2f} us   {t_add / t_torch:.2f}x torch.add "
          f"(goal <= {ADD_GOAL:.0f}x: {'met' if t_add <= ADD_GOAL * t_torch else 'NOT met'})")

    grid, fargs, launcher = (1,), (x, 1000), ck.launcher
    rows = [("noop entry, converted values", _raw(launcher, grid, fargs)),
            ("ck.launcher((1,), (x, n))", lambda: launcher(grid, fargs)),
            ("noop[(1,)](x, n)", lambda: noop[(1,)](x, 1000)),
            ("noop[lambda m: (1,)](x, n)", lambda: noop[lambda m: (1,)](x, 1000))]
    times = _interleaved([f for _, f in rows], a.calls, a.repeat)
    print(f"{'no-op kernel':<44} {'us/call':>8}  {'over entry':>10}")
    for (name, _), us in zip(rows, times):
        print(f"{name:<44} {us:8.2f}  {us - times[0]:10.2f}")

    lib, raw = library_call(a.calls // 2, a.repeat)
    print(f"{'kernels.rms_norm([1, 64])':<44} {lib:8.2f} us")
    print(f"{'rms_norm_kernel[(1,)](...) (the same launch)':<44} {raw:8.2f} us   library overhead "
          f"{lib - raw:.2f} us (goal <= {LIB_GOAL_US:.0f} us: {'met' if lib - raw <= LIB_GOAL_US else 'NOT met'})")


if __name__ == "__main__":
    main()
