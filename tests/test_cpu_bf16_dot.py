"""The cpu target's bf16 dot (tj_dot_bf16 in tilejit_cpu.h): in the fast policy, on a CPU with
AVX512-BF16, k runs in pairs through vdpbf16ps; elsewhere (the raw operands widened in registers),
and in strict, the ascending-k fma chain of every dot. Both orders are emulated here with fp32 tensor ops (a bf16 x bf16 product is
exact in fp32, so each step is one fp32 rounding) and must match to the bit."""
import os
import subprocess
import sys

import pytest
import torch

import kernels
from compiler import kernel, language as tl, numerics, use_target
from targets.cpu import CPUTarget, toolchain

pytestmark = pytest.mark.compile


def _has_avx512_bf16() -> bool:
    """Whether the cpu target's flags (-march=native, or TILEJIT_CPU_ARCH) enable AVX512-BF16."""
    cxx = toolchain.find_compiler()
    if cxx is None:
        return False
    out = subprocess.run([cxx, *toolchain.march_flags(), "-dM", "-E", "-x", "c++", "/dev/null"],
                         capture_output=True, text=True)
    return "__AVX512BF16__" in out.stdout


PAIRS = _has_avx512_bf16()   # the fast dot's order here: k pairs through vdpbf16ps, else ascending k


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


@pytest.mark.parametrize("M,K,N", [(8, 37, 32), (64, 128, 128), (3, 256, 16), (130, 64, 48), (7, 20, 96)])
def test_fast_bf16_dot_order(M, K, N):
    """k pairs through vdpbf16ps where the CPU has it, else the fma chain (register blocks of every
    row count and column width the shapes reach)."""
    a, b = _operands(M, K, N)
    assert torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=PAIRS))


@pytest.mark.parametrize("M,K,N", [(8, 37, 32), (64, 128, 128)])
def test_strict_bf16_dot_keeps_the_ascending_fma_chain(M, K, N):
    a, b = _operands(M, K, N, seed=2)
    with numerics("strict"):
        assert torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=False))


@pytest.mark.integration
def test_without_avx512_bf16_the_fast_dot_is_the_fma_chain(tmp_path):
    """A cache built for an ISA without the instruction (TILEJIT_CPU_ARCH=x86-64-v3) gets the
    ascending-k chain in the fast policy too."""
    code = ("import torch, kernels, sys\n"
            "sys.path.insert(0, %r)\n"
            "from test_cpu_bf16_dot import _operands, _emulated\n"
            "a, b = _operands(8, 37, 32)\n"
            "print(torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=False)))\n"
            % os.path.dirname(__file__))
    env = {**os.environ, "TILEJIT_CPU_ARCH": "x86-64-v3", "TILEJIT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("True"), r.stdout + r.stderr


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
    return c, _emulated(a * 2 if scale_a else a, b, pairs=PAIRS), ck.source


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
