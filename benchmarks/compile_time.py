"""Cold compile time per kernel: frontend, passes, rendering and the C++ build, each kernel
compiled into its own fresh, empty TILEJIT_CACHE_DIR so nothing is reused.

    python -m benchmarks.compile_time [--target cpu]

Uses the examples in `examples/example_kernels.py` (`EXAMPLES`) when present, otherwise four small
kernels defined here. Goal: <= 1 s per kernel.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import compiler  # noqa: E402
from compiler import KernelFunction, kernel, language as tl  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402

GOAL_S = 1.0


# ------------------------------------------------------------------ fallback kernels
@kernel
def _fb_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@kernel
def _fb_softmax(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=m)


@kernel
def _fb_rowsum(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@kernel
def _fb_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _fallback_cases():
    x, y, o = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    r = torch.randn(8, 100)
    ro = torch.empty_like(r)
    a, b, c = torch.randn(33, 45), torch.randn(45, 17), torch.empty(33, 17)
    return [
        ("vector_add", lambda: _fb_add[(4,)](x, y, o, 1000, BLOCK=256)),
        ("softmax_rows", lambda: _fb_softmax[(8,)](r, ro, 100, 100, BLOCK=128)),
        ("row_sum", lambda: _fb_rowsum[(8,)](r, ro, 100, 100, BLOCK=32)),
        ("matmul", lambda: _fb_matmul[(3, 2)](a, b, c, 33, 17, 45, BM=16, BN=16, BK=16)),
    ], [_fb_add, _fb_softmax, _fb_rowsum, _fb_matmul]


def _example_cases():
    try:
        from examples import example_kernels as ex  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - absent or broken: use the local kernels
        return None
    examples = getattr(ex, "EXAMPLES", None)
    if not examples:
        return None
    kfns = [v for v in vars(ex).values() if isinstance(v, KernelFunction)]
    cases = []
    for name, wrapper, _ref, make_inputs, shapes in examples:
        inputs = make_inputs(shapes[0])
        cases.append((name, lambda w=wrapper, a=inputs: w(*a)))
    return cases, kfns


@contextlib.contextmanager
def _fresh_cache():
    d = tempfile.mkdtemp(prefix="tilejit-bench-cold-")
    old = os.environ.get("TILEJIT_CACHE_DIR")
    os.environ["TILEJIT_CACHE_DIR"] = d
    try:
        yield d
    finally:
        if old is None:
            os.environ.pop("TILEJIT_CACHE_DIR", None)
        else:
            os.environ["TILEJIT_CACHE_DIR"] = old
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--target", default=None, help="target to compile for (default: TILEJIT_TARGET or cpu)")
    args = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    target_cm = compiler.use_target(args.target) if args.target else contextlib.nullcontext()

    found = _example_cases()
    source = "examples/example_kernels.py" if found else "local fallback kernels"
    cases, kfns = found or _fallback_cases()

    with target_cm:
        # one-time process costs (compiler source hash, toolchain probe) are not any kernel's
        with _fresh_cache():
            t0 = time.perf_counter()
            _fb_add[(1,)](torch.zeros(4), torch.zeros(4), torch.zeros(4), 4, BLOCK=4)
            setup = time.perf_counter() - t0
            _fb_add.compiled.clear()

        rows = []
        for name, run in cases:
            for k in kfns:
                k.compiled.clear()
            with _fresh_cache():
                t0 = time.perf_counter()
                run()
                wall = time.perf_counter() - t0
            cks = [ck for k in kfns for ck in k.compiled.values()]
            compile_s = sum(ck.compile_time for ck in cks)
            rows.append((name, ", ".join(sorted({ck.name for ck in cks})), compile_s, wall))

    w = max(len("example"), *(len(r[0]) for r in rows))
    kw = max(len("kernel(s)"), *(len(r[1]) for r in rows))
    tname = args.target or compiler.current_target().name
    print(f"cold compile time per kernel ({source}), target {tname}, goal <= {GOAL_S:.0f} s")
    print(f"{'example':<{w}}  {'kernel(s)':<{kw}}  {'compile s':>9}  {'first call s':>12}  goal")
    for name, kn, cs, wall in rows:
        print(f"{name:<{w}}  {kn:<{kw}}  {cs:9.3f}  {wall:12.3f}  {'ok' if cs <= GOAL_S else 'OVER'}")
    cs_all = [r[2] for r in rows]
    print(f"median {sorted(cs_all)[len(cs_all) // 2]:.3f} s, max {max(cs_all):.3f} s; "
          f"(not counted above: the process's first compile, a throwaway kernel with the "
          f"one-time setup, took {setup:.3f} s)")


if __name__ == "__main__":
    main()
