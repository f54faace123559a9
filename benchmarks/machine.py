"""What this machine can do at most, measured here: the fp32 FMA peak, the bf16 dot peak (where the
CPU has AVX512-BF16) and the copy bandwidth, so a benchmark can print how close a kernel comes to
the limit.

    python -m benchmarks.machine

- FMA peak: a small C program (compiled with the cpu target's own compiler and -march flags) runs
  independent chains of vector FMAs on every OpenMP thread, as many chains as hide the FMA
  latency; GFLOP/s = 2 x lanes x FMAs / s. It is the compute ceiling of the kernels tilejit
  generates here, not a vendor figure.
- bf16 dot peak: the same with the instruction the cpu target's fast bf16 dots run on: AMX's
  `tdpbf16ps` where the -march flags enable AMX-BF16 and Linux lends the process the tiles
  (16 x 16 x 32 products: 16384 flops per instruction, four independent C tiles), else
  `vdpbf16ps` where they enable AVX512-BF16 (each of the 16 fp32 lanes adds two bf16 products:
  64 flops per instruction).
- copy bandwidth: `dst.copy_(src)` of a 256 MiB fp32 tensor with torch's threads; GB/s counts
  the bytes read and written (2 x 256 MiB per copy).

Each is the best of several runs (a limit, not a typical value); the peaks repeat until three
runs in a row bring no gain, so one run slowed by other load does not set them.
"""
from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from compiler.clihelp import description  # noqa: E402

_FMA_SOURCE = r"""
#include <omp.h>
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
#define CHAINS 10
extern "C" int lanes(void) { return LANES; }
#ifdef __AVX512BF16__
#include <immintrin.h>
/* vdpbf16ps instructions executed by all threads */
extern "C" long long bf16_dot_run(long long iters, float* out) {
    long long total = 0;
    #pragma omp parallel reduction(+:total)
    {
        __m512 acc[CHAINS];
        const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3a833a83);
        for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps((float)c);
        for (long long i = 0; i < iters; ++i)
            for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
        __m512 s = acc[0];
        for (int c = 1; c < CHAINS; ++c) s = _mm512_add_ps(s, acc[c]);
        out[omp_get_thread_num() % 64] = _mm512_reduce_add_ps(s);
        total += iters * CHAINS;
    }
    return total;
}
#else
extern "C" long long bf16_dot_run(long long iters, float* out) { (void)iters; (void)out; return 0; }
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
/* tdpbf16ps instructions executed by all threads, into four independent C tiles (the caller has
   asked Linux for the tile registers) */
extern "C" long long amx_dot_run(long long iters, float* out) {
    long long total = 0;
    #pragma omp parallel reduction(+:total)
    {
        struct { unsigned char palette, start_row, reserved[14]; unsigned short colsb[16]; unsigned char rows[16]; } cfg = {};
        cfg.palette = 1;
        for (int t = 0; t < 8; ++t) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
        _tile_loadconfig(&cfg);
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
        for (long long i = 0; i < iters; ++i) {
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        }
        alignas(64) float c[16][16];
        _tile_stored(0, c, 64);
        __asm__ __volatile__("" ::: "memory");
        out[omp_get_thread_num() % 64] = c[0][0];
        _tile_release();
        total += iters * 4;
    }
    return total;
}
#else
extern "C" long long amx_dot_run(long long iters, float* out) { (void)iters; (void)out; return 0; }
#endif
/* FMAs executed by all threads; out keeps the chains alive */
extern "C" long long fma_run(long long iters, float* out) {
    long long total = 0;
    #pragma omp parallel reduction(+:total)
    {
        vf acc[CHAINS], a, b;
        /* every lane's b > 0: its chain settles at b / (1 - a); with b = 0 it would decay into
           denormals, whose FMAs take microcode assists (lane 0 did: a "peak" of 2 GFLOP/s) */
        for (int l = 0; l < LANES; ++l) { a[l] = 0.999f; b[l] = 0.001f * (l + 1); }
        for (int c = 0; c < CHAINS; ++c) acc[c] = b + (float)c;
        for (long long i = 0; i < iters; ++i)
            for (int c = 0; c < CHAINS; ++c) acc[c] = acc[c] * a + b;
        vf s = acc[0];
        for (int c = 1; c < CHAINS; ++c) s += acc[c];
        out[omp_get_thread_num() % 64] = s[0];
        total += iters * CHAINS;
    }
    return total;
}
"""


@functools.lru_cache(maxsize=1)
def _peak_library() -> ctypes.CDLL:
    """The peak programs, built with the cpu target's compiler and -march flags."""
    from targets.cpu import toolchain  # noqa: PLC0415
    cxx = toolchain.find_compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler: the peaks cannot be measured")
    with tempfile.TemporaryDirectory(prefix="tilejit-peak-") as d:
        src, lib = os.path.join(d, "peak.cpp"), os.path.join(d, "peak.so")
        with open(src, "w", encoding="utf-8") as f:
            f.write(_FMA_SOURCE)
        # the target keeps contraction off (a*b+c rounds twice); here a*b+c is meant to be one FMA
        flags = [*toolchain.BASE_FLAGS, "-ffp-contract=fast", *toolchain.march_flags()]
        subprocess.run([cxx, *flags, src, "-o", lib], check=True, capture_output=True)
        so = ctypes.CDLL(lib)
    for fn in (so.fma_run, so.bf16_dot_run, so.amx_dot_run):
        fn.restype = ctypes.c_longlong
        fn.argtypes = [ctypes.c_longlong, ctypes.POINTER(ctypes.c_float)]
    return so


def _best_gflops(run, flops_per_op: int) -> float:
    """GFLOP/s of `run` (ops executed by all threads): the best of runs of a few ms, repeated until
    three in a row bring no gain over 1% (at most 15: a busy machine's peak is not its limit);
    0 when it ran none."""
    out = (ctypes.c_float * 64)()
    run(10_000, out)
    best, calm = 0.0, 0
    for _ in range(15):
        t0 = time.perf_counter()
        ops = run(2_000_000, out)
        g = flops_per_op * ops / (time.perf_counter() - t0) / 1e9
        calm = calm + 1 if g <= best * 1.01 else 0
        best = max(best, g)
        if calm == 3 or not ops:
            break
    return best


@functools.lru_cache(maxsize=1)
def fma_peak_gflops() -> tuple[float, int, int]:
    """(GFLOP/s, threads, lanes) of fp32 FMAs on this machine."""
    so = _peak_library()
    lanes = so.lanes()
    return _best_gflops(so.fma_run, 2 * lanes), os.cpu_count() or 1, lanes


@functools.lru_cache(maxsize=1)
def bf16_dot_peak() -> tuple[float, str] | None:
    """(GFLOP/s, instruction) of the instruction the fast bf16 dots run on here, or None where the
    -march flags enable neither AMX-BF16 nor AVX512-BF16."""
    from targets.cpu import toolchain  # noqa: PLC0415
    if toolchain.amx_bf16_dot():
        return _best_gflops(_peak_library().amx_dot_run, 16 * 16 * 32 * 2), "tdpbf16ps"
    g = _best_gflops(_peak_library().bf16_dot_run, 64)
    return (g, "vdpbf16ps") if g else None


@functools.lru_cache(maxsize=1)
def copy_bandwidth_gbs() -> float:
    """GB/s of a 256 MiB fp32 copy (bytes read + written), best of 5."""
    src = torch.ones(64 * 1024 * 1024)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = max(best, 2 * src.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    return best


def summary_line() -> str:
    """One line for a benchmark's header."""
    try:
        peak, threads, lanes = fma_peak_gflops()
        fma = f"fp32 FMA peak {peak:.0f} GFLOP/s ({threads} threads x {lanes} lanes)"
        bf16 = bf16_dot_peak()
        fma += f", bf16 dot peak {bf16[0]:.0f} GFLOP/s ({bf16[1]})" if bf16 else ", no bf16 dot instruction"
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        fma = f"fp32 FMA peak not measured ({exc})"
    return f"machine limits (measured here): {fma}, copy bandwidth {copy_bandwidth_gbs():.1f} GB/s"


def main(argv=None) -> None:
    import argparse  # noqa: PLC0415
    argparse.ArgumentParser(description=description(__doc__)).parse_args(argv)
    print(summary_line())


if __name__ == "__main__":
    main()
