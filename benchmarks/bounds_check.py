"""What the cpu target's bounds-checked mode (TILEJIT_CPU_BOUNDS_CHECK=1) costs, as ratios measured
in one process: two library ops, each run on the plain cpu target and on a bounds-checked one
(`CPUTarget(bounds_check=True)`, what the variable selects), the same inputs and configs.

    python -m benchmarks.bounds_check [--repeat R] [--quick]

Samples of the two targets are interleaved (plain, checked, plain, ...) and each figure is the
median over R repeats, so a load change on the machine moves both alike. Before timing, each op's
checked output is compared with the plain one (they must be equal: the checks only skip accesses
outside a tensor), and the checked kernels are confirmed to hold the checks (`tj_bc` in their
source).
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
from compiler import use_target  # noqa: E402
from compiler.clihelp import description  # noqa: E402
from kernels.matmul import matmul_kernel  # noqa: E402
from kernels.norm import rms_norm_kernel  # noqa: E402
from targets.cpu import CPUTarget  # noqa: E402


def _cases(quick: bool):
    g = torch.Generator().manual_seed(0)
    rows, n = (64, 1024) if quick else (256, 4096)
    m = 128 if quick else 256
    x, w = torch.randn(rows, n, generator=g), torch.randn(n, generator=g)
    a, b = torch.randn(m, m, generator=g), torch.randn(m, m, generator=g)
    return [(f"rms_norm fp32 [{rows}, {n}]", lambda: kernels.rms_norm(x, w), rms_norm_kernel),
            (f"matmul fp32 [{m}, {m}] x [{m}, {m}]", lambda: kernels.matmul(a, b), matmul_kernel)]


def _seconds(fn, min_s: float = 0.02) -> float:
    """Seconds per call of fn, over enough calls to last min_s."""
    calls, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s:
            return t / calls
        calls *= 2


def _checked_sources(kfn) -> bool:
    return any("tj_bc(" in ck.source for ck in kfn.compiled.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bounds_check", description=description(__doc__))
    ap.add_argument("--repeat", type=int, default=7, help="interleaved samples per target (median kept)")
    ap.add_argument("--quick", action="store_true", help="smaller shapes")
    args = ap.parse_args(argv)
    plain, checked = CPUTarget(bounds_check=False), CPUTarget(bounds_check=True)
    print(f"{'op':<34} {'plain us':>10} {'checked us':>11} {'checked/plain':>14}")
    for name, fn, kfn in _cases(args.quick):
        with use_target(plain):
            want = fn()
        with use_target(checked):
            got = fn()
        if not torch.equal(want, got) or not _checked_sources(kfn):
            print(f"{name}: the checked run differs from the plain one or ran no checked kernel", file=sys.stderr)
            return 1
        samples = {"plain": [], "checked": []}
        for _ in range(args.repeat):
            for label, tgt in (("plain", plain), ("checked", checked)):
                with use_target(tgt):
                    samples[label].append(_seconds(fn))
        p, c = statistics.median(samples["plain"]), statistics.median(samples["checked"])
        print(f"{name:<34} {p * 1e6:>10.1f} {c * 1e6:>11.1f} {c / p:>13.2f}x")
    print("checked/plain: the time of a bounds-checked launch over a plain one (medians of interleaved samples; "
          f"{torch.get_num_threads()} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
