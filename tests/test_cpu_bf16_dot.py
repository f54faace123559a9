"""The cpu target's bf16 dot (tj_dot_bf16 in tilejit_cpu.h). In the fast policy: on a CPU with AMX,
tdpbf16ps on chunks of 32 k; with AVX512-BF16 alone, k pairs through vdpbf16ps; elsewhere (the raw
operands widened in registers), and in strict, the ascending-k fma chain of every dot. The pair and
chain orders are emulated here with fp32 tensor ops (a bf16 x bf16 product is exact in fp32, so each
step is one fp32 rounding); AMX's own order within a chunk is the instruction's, so its reference is
a small C program that runs the instruction on each whole 16 x 16 tile of C, 32 k at a time from
k = 0. Each must match to the bit."""
import ctypes
import os
import subprocess
import sys

import pytest
import torch

import kernels
from compiler import kernel, language as tl, numerics, use_target
from targets.cpu import CPUTarget, toolchain

pytestmark = pytest.mark.compile

# the fast dot's order here: AMX chunks, k pairs through vdpbf16ps, else ascending k
ORDER = "amx" if toolchain.amx_bf16_dot() else "pairs" if "__AVX512BF16__" in toolchain.predefined_macros() \
    else "chain"

_AMX_REFERENCE = r"""
#include <immintrin.h>
#include <cstdint>
// the tile intrinsics do not tell GCC that they read or write memory (and GCC 12's config load
// names only 8 of its 64 bytes: the load below names the whole configuration)
#define FENCE() __asm__ __volatile__("" ::: "memory")
// C[M][N] += A[M][K] B[K][N] (bf16 bits, row-major): each 16 x 16 tile of C takes tdpbf16ps on
// 32 k at a time from k = 0, the operands padded with zeros
extern "C" void amx_dot(const uint16_t* A, const uint16_t* B, float* C, int M, int N, int K) {
    struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg = {};
    cfg.palette = 1;
    for (int t = 0; t < 3; ++t) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    __asm__ __volatile__("ldtilecfg %0" :: "m"(cfg));
    for (int m0 = 0; m0 < M; m0 += 16)
        for (int n0 = 0; n0 < N; n0 += 16) {
            alignas(64) float c[16][16] = {};
            for (int m = 0; m < 16 && m0 + m < M; ++m)
                for (int n = 0; n < 16 && n0 + n < N; ++n) c[m][n] = C[(m0 + m) * N + n0 + n];
            FENCE();
            _tile_loadd(0, c, 64);
            for (int k0 = 0; k0 < K; k0 += 32) {
                alignas(64) uint16_t a[16][32] = {}, b[16][32] = {};
                for (int m = 0; m < 16 && m0 + m < M; ++m)
                    for (int k = 0; k < 32 && k0 + k < K; ++k) a[m][k] = A[(m0 + m) * K + k0 + k];
                for (int k = 0; k < 32 && k0 + k < K; ++k)
                    for (int n = 0; n < 16 && n0 + n < N; ++n) b[k / 2][2 * n + k % 2] = B[(k0 + k) * N + n0 + n];
                FENCE();
                _tile_loadd(1, a, 64);
                _tile_loadd(2, b, 64);
                _tile_dpbf16ps(0, 1, 2);
            }
            _tile_stored(0, c, 64);
            FENCE();
            for (int m = 0; m < 16 && m0 + m < M; ++m)
                for (int n = 0; n < 16 && n0 + n < N; ++n) C[(m0 + m) * N + n0 + n] = c[m][n];
        }
    _tile_release();
}
"""


def _amx_reference(a, b, tmp_dir=[]):
    """fp32 C = A B through the reference program above (built once per session)."""
    if not tmp_dir:
        import tempfile
        d = tempfile.mkdtemp(prefix="tilejit-amx-ref-")
        src, lib = os.path.join(d, "ref.cpp"), os.path.join(d, "ref.so")
        with open(src, "w") as f:
            f.write(_AMX_REFERENCE)
        subprocess.run([toolchain.find_compiler(), "-O1", "-shared", "-fPIC", *toolchain.march_flags(), src,
                        "-o", lib], check=True)
        tmp_dir.append(ctypes.CDLL(lib))
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros(M, N)
    A, B = a.contiguous().view(torch.int16), b.contiguous().view(torch.int16)
    tmp_dir[0].amx_dot(ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()), ctypes.c_void_p(c.data_ptr()),
                       M, N, K)
    return c


def _operands(M, K, N, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g).bfloat16(), torch.randn(K, N, generator=g).bfloat16()


def _emulated(a, b, pairs: bool):
    """fp32 C = A B in the pair order of vdpbf16ps (k + 1, then k, per pair) or in ascending k."""
    A, B = a.float(), b.float()
    c = torch.zeros(a.shape[0], b.shape[1])
    K = a.shape[1]
    order = [k for p in range(0, K, 2) for k in (p + 1, p) if k < K] if pairs else range(K)
    for k in order:
        c = c + A[:, k:k + 1] * B[k:k + 1, :]
    return c


def _fast_dot(a, b):
    """The fast policy's bf16 dot on this machine, computed independently of the lowering."""
    return _amx_reference(a, b) if ORDER == "amx" else _emulated(a, b, pairs=ORDER == "pairs")


@pytest.mark.parametrize("M,K,N", [(8, 37, 32), (64, 128, 128), (3, 256, 16), (130, 64, 48), (7, 20, 96),
                                   (50, 300, 80)])
def test_fast_bf16_dot_order(M, K, N):
    """AMX chunks or k pairs through vdpbf16ps where the CPU has them, else the fma chain (tiles and
    register blocks of every row count and column width the shapes reach)."""
    a, b = _operands(M, K, N)
    assert torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _fast_dot(a, b))


_DIRECT_CALLS = r"""
#include "tilejit_cpu.h"
#include <cstdio>
// C = A B for each shape through tj_dot_bf16, operands read from and results written to files
template <int M, int N, int K> static void one(FILE* in, FILE* out) {
    static uint16_t A[M * K], B[K * N], Bp[K * N];
    static float C[M * N];
    if (fread(A, 2, M * K, in) != M * K || fread(B, 2, K * N, in) != K * N) throw 1;
    for (int k = 0; k < K; ++k)   // the pair layout of the dot's B
        for (int n = 0; n < N; ++n) Bp[(k / 2) * 2 * N + 2 * n + k % 2] = B[k * N + n];
    for (float& c : C) c = 0.0f;
    tj_dot_bf16<M, N, K>(A, Bp, C);
    fwrite(C, 4, M * N, out);
}
int main(int, char** argv) {
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    SHAPES
    fclose(out);
    return 0;
}
"""


@pytest.mark.integration
@pytest.mark.parametrize("opt", ["-O1", "-O2", "-O3"])
def test_the_dot_compiled_on_its_own_at_every_optimisation_level(tmp_path, opt):
    """tj_dot_bf16 called straight from a program at each optimisation level gives the reference's
    bits. GCC 12 dropped the stores of the AMX tile configuration at -O1 and -O2 (its config-load
    intrinsic names 8 of the 64 bytes read): the program faulted. Kernels build at -O3, where the
    inlining happened to keep them; this catches the class for every level."""
    shapes = [(32, 64, 64), (16, 32, 96), (50, 80, 300), (64, 128, 256)]
    calls = "\n    ".join(f"one<{m}, {n}, {k}>(in, out);" for m, n, k in shapes)
    src, exe = tmp_path / "direct.cpp", tmp_path / "direct"
    src.write_text(_DIRECT_CALLS.replace("SHAPES", calls))
    flags = [f for f in toolchain.BASE_FLAGS if f not in ("-O3", "-shared", "-fPIC")]
    subprocess.run([toolchain.find_compiler(), opt, *flags, *toolchain.march_flags(), "-DTILEJIT_VECTOR_HELPERS",
                    f"-I{toolchain.HEADER_DIR}", str(src), "-o", str(exe)], check=True)
    operands = [_operands(m, k, n, seed=i) for i, (m, n, k) in enumerate(shapes)]
    (tmp_path / "in").write_bytes(b"".join(t.view(torch.int16).numpy().tobytes() for ab in operands for t in ab))
    r = subprocess.run([str(exe), str(tmp_path / "in"), str(tmp_path / "out")], capture_output=True, timeout=60)
    assert r.returncode == 0, f"the program ended with {r.returncode}: {r.stderr.decode()}"
    got = torch.frombuffer(bytearray((tmp_path / "out").read_bytes()), dtype=torch.float32)
    want = torch.cat([_fast_dot(a, b).flatten() for a, b in operands])
    assert torch.equal(got, want)


@pytest.mark.parametrize("M,K,N", [(8, 37, 32), (64, 128, 128)])
def test_strict_bf16_dot_keeps_the_ascending_fma_chain(M, K, N):
    a, b = _operands(M, K, N, seed=2)
    with numerics("strict"):
        assert torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=False))


@pytest.mark.integration
@pytest.mark.parametrize("arch,order", [
    ("x86-64-v3", "chain"),
    pytest.param("cooperlake", "pairs", marks=pytest.mark.skipif(
        ORDER == "chain", reason="this CPU has no AVX512-BF16: a cooperlake build would not run here")),
])
def test_a_build_for_another_isa_takes_its_dot_order(tmp_path, arch, order):
    """A cache built for an ISA without AMX (TILEJIT_CPU_ARCH=cooperlake: AVX512-BF16 alone) runs k
    pairs through vdpbf16ps; without either (x86-64-v3) the fast policy keeps the ascending-k chain."""
    code = ("import torch, kernels, sys\n"
            "sys.path.insert(0, %r)\n"
            "from test_cpu_bf16_dot import ORDER, _operands, _emulated\n"
            "a, b = _operands(8, 37, 32)\n"
            "print(ORDER, torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=%r)))\n"
            % (os.path.dirname(__file__), order == "pairs"))
    env = {**os.environ, "TILEJIT_CPU_ARCH": arch, "TILEJIT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{order} True"), r.stdout + r.stderr


# -- the operand layouts: raw bf16 fills straight from memory, or packs of a float tile ----------
@kernel
def _dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_bk, s_bn, SCALE_A: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    b = tl.load(b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn, mask=(rk[:, None] < K) & (rn[None, :] < N),
                other=0.0)
    if SCALE_A:   # A computed, not loaded: packed from its float tile before the dot
        a = (a * 2.0).to(tl.bfloat16)
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _run_dot(M, N, K, b_columns: bool, scale_a=False, tile=(32, 64, 32), seed=3):
    a, b = _operands(M, K, N, seed)
    bt = b.t().contiguous().t() if b_columns else b   # the same values, contiguous down each column
    c = torch.full((M, N), float("nan"))
    ck = _dot_kernel[(1,)](a, bt, c, M, N, K, bt.stride(0), bt.stride(1), SCALE_A=scale_a,
                           BM=tile[0], BN=tile[1], BK=tile[2])
    return c, _fast_dot(a * 2 if scale_a else a, b), ck.source


@pytest.mark.parametrize("b_columns", [False, True], ids=["b-rows", "b-columns"])
@pytest.mark.parametrize("M,N,K", [(32, 64, 32), (19, 40, 27)], ids=["whole-tile", "edges"])
def test_raw_operand_fills_give_the_pair_order_bits(M, N, K, b_columns):
    """A and B are loaded only for the dot, so they are filled as raw bf16 bits in the dot's
    layouts (B from row pointers, or as 32-bit pair words down its columns); masked edges fill
    element by element with the load's `other`."""
    got, want, src = _run_dot(M, N, K, b_columns)
    assert torch.equal(got, want)
    assert "uint16_t v" in src and "tj_pack_bf16" not in src
    assert ("tj_fill_transposed<3>" if b_columns else "tj_fill_bf16_pairs<32, 64>") in src


def test_a_k_tile_shorter_than_a_matrix_unit_chunk_is_padded_with_zeros():
    """A 16-k tile (less than AMX's 32-k chunk) gives the bits of the whole K in one padded chunk."""
    got, want, _ = _run_dot(19, 40, 13, b_columns=False, tile=(32, 64, 16))
    assert torch.equal(got, want)


def test_a_computed_operand_is_packed_from_its_float_tile():
    got, want, src = _run_dot(19, 64, 32, b_columns=False, scale_a=True)
    assert torch.equal(got, want)
    assert "tj_pack_bf16_rows<32, 32>" in src and "tj_fill_bf16_pairs<32, 64>" in src


def test_the_bounds_checked_lowering_fills_raw_operands_element_by_element():
    with use_target(CPUTarget(bounds_check=True)):
        got, want, src = _run_dot(16, 32, 16, b_columns=True, tile=(16, 32, 16))
    assert torch.equal(got, want)
    assert "tj_bc(" in src and "tj_fill_transposed" not in src and "tj_fill_bf16_pairs" not in src


def test_strict_keeps_float_operands():
    """Outside the bf16 dot (strict policy here) a bf16 tile stays a float tile: no raw layout."""
    with numerics("strict"):
        got, _, src = _run_dot(19, 40, 27, b_columns=False)
        a, b = _operands(19, 27, 40, 3)
        assert torch.equal(got, _emulated(a, b, pairs=False))
    assert "tj_dot_bf16" not in src and "uint16_t v" not in src
