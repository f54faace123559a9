"""tl.randint / randint4x / rand / randn: Philox 4x32-10 with the same bits as Triton. The reference
is the same kernel run by Triton's own interpreter (TRITON_INTERPRET=1, in a subprocess, as the
differential tests do); tilejit runs it on cpu, kunlun:xpu3 (host emulation) and gpu:interpret.
randint and rand are bitwise equal; randn goes through log/sqrt/sin/cos, so it is compared with
a tolerance."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import triton.language as tl

import compiler
import targets.kunlun
from compiler import CompilationError
from compiler.target import register_target

pytestmark = pytest.mark.compile

register_target("kunlun", targets.kunlun.TARGET)
SEEDS = (0, 12345, -7, 2 ** 33 + 5)
N = 128


def rng_kernel(seed, out_i, out_f, out_n, N: tl.constexpr):
    offs = tl.arange(0, N)
    r0, r1, r2, r3 = tl.randint4x(seed, offs + 1000)
    tl.store(out_i + offs, tl.randint(seed, offs))
    tl.store(out_i + N + offs, r0)
    tl.store(out_i + 2 * N + offs, r1)
    tl.store(out_i + 3 * N + offs, r2 ^ r3)
    tl.store(out_f + offs, tl.rand(seed, offs * 7 + 3))
    tl.store(out_n + offs, tl.randn(seed, offs))


def _outputs():
    return torch.zeros(4 * N, dtype=torch.int32), torch.zeros(N), torch.zeros(N)


@pytest.fixture(scope="module")
def triton_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("philox") / "ref.pt"
    here = os.path.dirname(os.path.abspath(__file__))
    code = textwrap.dedent(f"""
        import sys, torch, triton
        sys.path.insert(0, {here!r})
        import test_random as m
        k = triton.jit(m.rng_kernel)
        res = {{}}
        for seed in m.SEEDS:
            outs = m._outputs()
            k[(1,)](seed, *outs, N=m.N)
            res[seed] = outs
        torch.save(res, {str(out)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TRITON_INTERPRET="1"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"Triton's interpreter failed:\n{proc.stdout}\n{proc.stderr}"
    return torch.load(out)


@pytest.mark.integration
@pytest.mark.parametrize("tgt", ["cpu", "kunlun:xpu3", "gpu:interpret"])
def test_philox_bits_equal_tritons(tgt, triton_reference):
    k = compiler.kernel(rng_kernel)
    for seed in SEEDS:
        if tgt.startswith("kunlun") and not -2 ** 31 <= seed < 2 ** 31:
            continue   # the kunlun target takes 32-bit integer arguments
        outs = _outputs()
        with compiler.use_target(tgt):
            k[(1,)](seed, *outs, N=N)
        want_i, want_f, want_n = triton_reference[seed]
        assert torch.equal(outs[0], want_i), f"seed {seed}: randint / randint4x bits differ"
        assert torch.equal(outs[1], want_f), f"seed {seed}: rand differs"
        torch.testing.assert_close(outs[2], want_n, rtol=1e-5, atol=1e-5)
    assert 0 < outs[1].min() and outs[1].max() < 1


@pytest.mark.no_toolchain
def test_randn_has_no_strict_lowering():
    with compiler.numerics("strict"), pytest.raises(CompilationError, match="tl.cos has no strict"):
        compiler.kernel(rng_kernel)[(1,)](0, *_outputs(), N=N)
