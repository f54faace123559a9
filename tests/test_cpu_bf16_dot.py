"""The cpu target's bf16 dot (tj_dot_bf16 in tilejit_cpu.h): in the fast policy, on a CPU with
AVX512-BF16, k runs in pairs through vdpbf16ps; elsewhere, and in strict, the ascending-k fma
chain of every dot. Both orders are emulated here with fp32 tensor ops (a bf16 x bf16 product is
exact in fp32, so each step is one fp32 rounding) and must match to the bit."""
import os
import subprocess
import sys

import pytest
import torch

import kernels
from compiler import numerics
from targets.cpu import toolchain


def _has_avx512_bf16() -> bool:
    """Whether the cpu target's flags (-march=native, or TILEJIT_CPU_ARCH) enable AVX512-BF16."""
    cxx = toolchain.find_compiler()
    if cxx is None:
        return False
    out = subprocess.run([cxx, *toolchain.march_flags(), "-dM", "-E", "-x", "c++", "/dev/null"],
                         capture_output=True, text=True)
    return "__AVX512BF16__" in out.stdout


needs_bf16 = pytest.mark.skipif(not _has_avx512_bf16(), reason="this CPU (or TILEJIT_CPU_ARCH) has no AVX512-BF16")


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


@needs_bf16
@pytest.mark.parametrize("M,K,N", [(8, 37, 32), (64, 128, 128), (3, 256, 16), (130, 64, 48)])
def test_fast_bf16_dot_runs_k_in_pairs(M, K, N):
    a, b = _operands(M, K, N)
    assert torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=True))


@pytest.mark.parametrize("M,K,N", [(8, 37, 32), (64, 128, 128)])
def test_strict_bf16_dot_keeps_the_ascending_fma_chain(M, K, N):
    a, b = _operands(M, K, N, seed=2)
    with numerics("strict"):
        assert torch.equal(kernels.matmul(a, b, out_dtype=torch.float32), _emulated(a, b, pairs=False))


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
