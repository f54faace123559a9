"""Communication overlapped with a kernel on another stream vs the two one after the other, on 2
ranks on 127.0.0.1 (gloo, cpu target).

    .venv/bin/python -m benchmarks.overlap [--world 2] [--mib 32] [--matmul 512] [--repeat 5]

Each rank runs a tilejit matmul ([n, n] @ [n, n], fp32) on a compute stream and an all_reduce of
`--mib` MiB on a comm stream:

- serial:     the kernel, wait, then the all_reduce, wait;
- overlapped: both submitted at once to their streams, then both waited.

ratio = overlapped / serial (lower is better); the ideal is max(kernel, comm) / (kernel + comm),
reached only with a free core for each. Each rank runs its kernel on one OpenMP thread, so a rank
needs a core for the kernel plus the cores gloo uses for the reduction and the loopback TCP
copies; with fewer cores than that the streams still overlap but share cores, and the ratio tells
how much of the ideal this machine can give. Figures are medians over `repeat` alternating runs.
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
import torch.distributed as dist  # noqa: E402

import kernels  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402
from runtime.collectives import run_ranks  # noqa: E402
from runtime.stream import Stream  # noqa: E402


def _bench(comm, mib, n, repeat):
    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    buf = torch.ones(int(mib * (1 << 20)) // 4)
    compute, comm_stream = Stream("compute"), Stream("comm")
    kern = lambda: compute.submit(kernels.matmul, a, b, out=c)         # noqa: E731
    red = lambda: comm.all_reduce(buf, stream=comm_stream)             # noqa: E731
    kern().wait(), red().wait()                                        # warm-up: compile/load, connect

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def overlapped():
        hs = [red(), kern()]
        [h.wait() for h in hs]
    t = {"kernel": [], "comm": [], "serial": [], "overlapped": []}
    for _ in range(repeat):
        t["kernel"].append(timed(lambda: kern().wait()))
        t["comm"].append(timed(lambda: red().wait()))
        t["serial"].append(timed(lambda: (kern().wait(), red().wait())))
        t["overlapped"].append(timed(overlapped))
    compute.close(), comm_stream.close()
    return {k: statistics.median(v) for k, v in t.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--mib", type=float, default=32.0)
    ap.add_argument("--matmul", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    os.environ["OMP_NUM_THREADS"] = "1"          # inherited by the ranks: one core per kernel
    kernels.matmul(torch.randn(a.matmul, a.matmul), torch.randn(a.matmul, a.matmul))   # compile once here
    res = run_ranks(_bench, a.world, a.mib, a.matmul, a.repeat, timeout=120, deadline=600)
    print(f"world {a.world}, gloo on 127.0.0.1, {os.cpu_count()} cores; matmul {a.matmul}^3 fp32 on a "
          f"compute stream, all_reduce {a.mib:g} MiB fp32 on a comm stream; median of {a.repeat}")
    print(f"{'rank':>4} {'kernel ms':>10} {'comm ms':>9} {'serial ms':>10} {'overlap ms':>11} "
          f"{'ratio':>6} {'ideal':>6}")
    for r, m in enumerate(res):
        ideal = max(m["kernel"], m["comm"]) / (m["kernel"] + m["comm"])
        print(f"{r:>4} {m['kernel'] * 1e3:>10.1f} {m['comm'] * 1e3:>9.1f} {m['serial'] * 1e3:>10.1f} "
              f"{m['overlapped'] * 1e3:>11.1f} {m['overlapped'] / m['serial']:>6.2f} {ideal:>6.2f}")
    print("ratio = overlapped / serial (lower is better); ideal = max(kernel, comm) / (kernel + comm)")


if __name__ == "__main__":
    main()
