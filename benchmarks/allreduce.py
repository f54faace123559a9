"""all_reduce bus bandwidth through `runtime.collectives.Communicator` vs raw `torch.distributed`,
in the same run, on 2 ranks on 127.0.0.1 (gloo).

    .venv/bin/python -m benchmarks.allreduce [--world 2] [--sizes-mib 0.25,1,4,16,64] [--repeat 7]

Bus bandwidth is NCCL's definition: 2 (n-1)/n x bytes / time, the traffic each rank's link carries
in a ring all_reduce, so figures compare across world sizes. The two paths alternate block by
block (raw, communicator, raw, ...) so that drift in machine load hits both alike; each figure is
the median over `repeat` blocks. The communicator's extra work per op is the arrival record
(one store write, the side channel that names missing ranks on a timeout) and a Python handle.
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

from compiler.clihelp import description, line_buffered  # noqa: E402
from runtime.collectives import run_ranks  # noqa: E402


def _block(fn, t, iters):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(t)
    return (time.perf_counter() - t0) / iters


def _bench(comm, sizes_mib, repeat, min_time):
    torch.set_num_threads(1)
    raw = lambda t: dist.all_reduce(t, async_op=True).wait()      # noqa: E731 - same async shape as ours
    ours = lambda t: comm.all_reduce(t).wait()                      # noqa: E731
    rows = []
    for mib in sizes_mib:
        t = torch.ones(int(mib * (1 << 20)) // 4)
        for f in (raw, ours):                                        # warm-up: connections, buffers
            f(t)
        once = _block(raw, t, 1)
        it = torch.tensor([max(1, min(200, int(min_time / max(once, 1e-6))))])
        dist.all_reduce(it, op=dist.ReduceOp.MIN)                   # every rank must run the same count
        iters = int(it)
        times = {"raw": [], "comm": []}
        for _ in range(repeat):
            times["raw"].append(_block(raw, t, iters))
            times["comm"].append(_block(ours, t, iters))
        rows.append((mib, iters, statistics.median(times["raw"]), statistics.median(times["comm"]),
                     min(times["raw"]), min(times["comm"])))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--sizes-mib", default="0.004,0.25,1,4,16,64")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--min-time", type=float, default=0.1, help="seconds per timed block")
    a = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    sizes = [float(s) for s in a.sizes_mib.split(",")]
    rows = run_ranks(_bench, a.world, sizes, a.repeat, a.min_time, timeout=120, deadline=900)[0]
    n = a.world
    print(f"all_reduce fp32, world {n}, gloo on 127.0.0.1; median of {a.repeat} alternating blocks")
    print(f"{'size MiB':>9} {'iters':>6} {'raw ms':>9} {'comm ms':>9} {'raw GB/s':>9} {'comm GB/s':>10} "
          f"{'overhead':>9} {'ovh(best)':>9}")
    for mib, iters, tr, tc, br, bc in rows:
        nbytes = mib * (1 << 20)
        bus = lambda s: 2 * (n - 1) / n * nbytes / s / 1e9           # noqa: E731
        print(f"{mib:>9g} {iters:>6} {tr * 1e3:>9.3f} {tc * 1e3:>9.3f} {bus(tr):>9.2f} {bus(tc):>10.2f} "
              f"{(tc / tr - 1) * 100:>8.1f}% {(bc / br - 1) * 100:>8.1f}%")
    print("bus GB/s = 2(n-1)/n x bytes / time; overhead = comm time / raw time - 1 on the medians,"
          "\n ovh(best) the same on the fastest block of each (less sensitive to other load); "
          "goal: within 5%")


if __name__ == "__main__":
    main()
