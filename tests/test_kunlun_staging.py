"""SM staging on kunlun (targets/kunlun/plan/staging.py): which loads a cluster's cores share, the
team mapping with its ghost programs, the emulation's barrier, and results equal to cpu."""
import ctypes
import re
import subprocess

import pytest
import torch

import kernels
import targets.kunlun
from compiler import kernel, language as tl, numerics, render_only, use_target
from compiler.target import register_target
from targets.kunlun import ARCHS
from targets.kunlun.build import toolchain
from targets.kunlun.codegen import lint as L
from targets.kunlun.plan.staging import team_size

pytestmark = pytest.mark.emulation

register_target("kunlun", targets.kunlun.TARGET)


def _sources(fn, arch="xpu2", policy="fast"):
    with use_target(f"kunlun:{arch}"), numerics(policy), render_only() as seen:
        fn()
    return [r.source for r in seen]


@kernel
def _weighted_rows(x_ptr, w_ptr, lens_ptr, starts_ptr, out_ptr, N, MODE: tl.constexpr, BLOCK: tl.constexpr):
    """out[b, r] = sum_c x[b, r, c] * w[c] over c < N (MODE 0) or c < lens[b] (MODE 1: the loop's
    trip count depends on program_id(1); MODE 2: w read through a pointer the loop carries; MODE 3:
    request b's w packed at starts[b], read without a mask)."""
    r = tl.program_id(0)
    b = tl.program_id(1)
    n = N
    if MODE > 0:
        n = tl.load(lens_ptr + b)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    w_at = w_ptr
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < n
        if MODE == 2:
            w = tl.load(w_at + tl.arange(0, BLOCK), mask=m, other=0.0)
            w_at += BLOCK
        elif MODE == 3:
            w = tl.load(w_ptr + tl.load(starts_ptr + b) + cols)
        else:
            w = tl.load(w_ptr + cols, mask=m, other=0.0)
        x = tl.load(x_ptr + (b * tl.num_programs(0) + r) * N + cols, mask=m, other=0.0)
        acc += x * w
    tl.store(out_ptr + b * tl.num_programs(0) + r, tl.sum(acc, axis=0))


def _weighted(x, w, lens, mode):
    B, R, N = x.shape
    out = torch.empty(B, R)
    starts = torch.cumsum(lens, 0, dtype=torch.int32) - lens
    _weighted_rows[(R, B)](x, w, lens, starts, out, N, MODE=mode, BLOCK=16)
    return out


def _inputs():
    g = torch.Generator().manual_seed(3)
    # w holds the requests' weights packed end to end: 48 + 16, nothing after the last one, so a
    # load past request 1's own rows would leave the tensor
    return torch.randn(2, 3, 48, generator=g), torch.randn(64, generator=g), torch.tensor([48, 16], dtype=torch.int32)


@pytest.mark.no_toolchain
def test_only_loads_every_program_of_a_team_reads_are_staged():
    q = torch.randn(1, 2, 32, 32)
    cfg = {"BLOCK_M": 8, "BLOCK_N": 16}
    plain = _sources(lambda: kernels.attention(q, q, q, config=cfg))[0]
    assert len(re.findall(r"^//   SM slot of", plain, re.M)) == 2   # K and V
    assert plain.count("sync_cluster();") == 4                      # two barriers per staged load
    assert "tj_cluster_max(" not in plain
    assert L.lint(plain) == []
    unguarded = plain.replace("if (tj_team > 1) sync_cluster();", "sync_cluster();", 1)
    assert ("cluster-barrier", "sync_cluster();") in L.lint(unguarded)
    # causal: the key loop ends at program_id(0)'s diagonal, so it runs to the cluster's longest
    # trip count, its extra iterations a shadow with the same barriers
    causal = _sources(lambda: kernels.attention(q, q, q, causal=True, config=cfg))[0]
    assert "tj_cluster_max(" in causal and causal.count("sync_cluster();") == 8 and L.lint(causal) == []
    x, w, lens = _inputs()
    same = _sources(lambda: _weighted(x, w, lens, 0))[0]
    assert len(re.findall(r"^//   SM slot of", same, re.M)) == 1   # w; x depends on program_id(0)
    assert "tj_cluster_max(" not in same
    for mode in (1, 3):   # a trip count per program_id(1): shadowed
        varlen = _sources(lambda: _weighted(x, w, lens, mode))[0]
        assert len(re.findall(r"^//   SM slot of", varlen, re.M)) == 1 and "tj_cluster_max(" in varlen
    carried = _sources(lambda: _weighted(x, w, lens, 2))[0]   # the extra iterations would not advance w_at
    assert "sync_cluster();" not in carried


@pytest.mark.sampled
@pytest.mark.parametrize("arch", ["xpu2", "xpu3"])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_staged_kernel_with_ghost_programs_matches_cpu(arch, mode):
    # 3 programs along axis 0 run as a team of 4: one ghost per team, whose stores must not land;
    # modes 1 to 3 run request 1's loop in shadow past its 16 columns, to request 0's 48
    x, w, lens = _inputs()
    n = [int(lens[b]) if mode else 48 for b in range(2)]
    at = [0, 48] if mode == 3 else [0, 0]
    ref = torch.stack([(x[b, :, :n[b]] * w[at[b]:at[b] + n[b]]).sum(-1) for b in range(2)])
    assert team_size(3, ARCHS[arch].cores_per_cluster, 64, ARCHS[arch].sm_bytes_per_cluster) == 4
    with use_target(f"kunlun:{arch}"), numerics("strict"):
        out = _weighted(x, w, lens, mode)
    with use_target("cpu"), numerics("strict"):
        cpu = _weighted(x, w, lens, mode)
    assert torch.equal(out, cpu)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.sampled
@pytest.mark.parametrize("policy", ["fast", "strict"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_q", [64, 20, 1])   # 8 query blocks, 3 (a ghost per team), decode (no team)
def test_staged_attention_is_bitwise_the_cpu_result(policy, causal, seq_q):
    g = torch.Generator().manual_seed(seq_q)
    q = torch.randn(1, 2, seq_q, 32, generator=g)
    k, v = torch.randn(1, 2, 48, 32, generator=g), torch.randn(1, 2, 48, 32, generator=g)
    cfg = {"BLOCK_M": 8, "BLOCK_N": 16}
    with use_target("kunlun:xpu2"), numerics(policy):
        out = kernels.attention(q, k, v, causal=causal, config=cfg)
    with use_target("cpu"), numerics(policy):
        cpu = kernels.attention(q, k, v, causal=causal, config=cfg)
    if policy == "strict":
        assert torch.equal(out, cpu)
    torch.testing.assert_close(out, kernels.attention_ref(q, k, v, causal=causal), rtol=1e-4, atol=1e-5)


_BARRIER_SRC = r'''
#include "tilejit_xpu.h"
static void k(int* count, int mode) {
    if (mode == 1 && core_id() == 0) sync_cluster();   // one core passes a barrier the others never reach
    sync_cluster();
    __atomic_fetch_add(count, 1, __ATOMIC_RELAXED);
}
extern "C" int run(int* count, int mode) {
    return tj_emu_launch(3, 8, mode != 2, [=]() { k(count, mode); });
}
extern "C" int team(int g0, int cores, int slot, int sm) { return tj_team_size(g0, cores, slot, sm); }
'''


@pytest.fixture(scope="module")
def barrier_lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("barrier")
    (d / "b.xpu").write_text(_BARRIER_SRC)
    subprocess.run(toolchain.emulation_command(ARCHS["xpu2"], str(d / "b.xpu"), str(d / "b.so")), check=True)
    lib = ctypes.CDLL(str(d / "b.so"))
    lib.run.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.tj_emu_error.restype = ctypes.c_char_p
    lib.tj_emu_set_regions.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


@pytest.mark.no_toolchain
@pytest.mark.parametrize("mode, message", [
    (0, None),
    (1, "do not reach it equally often"),
    (2, "called by a kernel launched without SM staging")])
def test_the_emulated_barrier_fails_instead_of_hanging(barrier_lib, mode, message):
    count = ctypes.c_int(0)
    barrier_lib.tj_emu_set_regions(0, None, None)
    rc = barrier_lib.run(ctypes.byref(count), mode)
    err = barrier_lib.tj_emu_error().decode()
    if message is None:
        assert rc == 0 and count.value == 24, err
    else:
        assert rc == -1 and message in err, err


@pytest.mark.no_toolchain
def test_team_size_is_one_rule_in_the_kernel_and_the_cost_model(barrier_lib):
    for g0 in (1, 2, 3, 5, 8, 63, 64, 65, 1000):
        for cores in (8, 64):
            for slot in (0, 64, 4096, 65536, 300000):
                assert barrier_lib.team(g0, cores, slot, 262144) == team_size(g0, cores, slot, 262144), \
                    (g0, cores, slot)
