"""Atomics with their real semantics (old values returned, masks honoured) on cpu, kunlun:xpu3
(host emulation) and gpu:interpret; the strict policy refuses a floating-point atomic_add and
accepts integer ones; a spin lock built from atomic_cas / atomic_xchg in a while loop;
tl.device_print (cpu prints, gpu renders Triton's), tl.device_assert (cpu and the kunlun
emulation raise at the assert's line) and Python's assert on run-time values."""
from __future__ import annotations

import pytest
from tiers import on_targets
import torch

import compiler
import targets.kunlun
from compiler import CompilationError, DeviceAssertionError, kernel
from compiler import language as tl
from compiler.target import register_target
from targets.kunlun.runtime.launcher import KunlunLaunchError

pytestmark = pytest.mark.compile

register_target("kunlun", targets.kunlun.TARGET)
TARGETS = on_targets("cpu", "kunlun:xpu3", "gpu:interpret")


@kernel
def atomics_kernel(cnt_ptr, acc_ptr, old_ptr, mx_ptr, x_ptr, N: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + pid * N + offs)
    tl.store(old_ptr + pid, tl.atomic_add(cnt_ptr, 1))
    tl.atomic_add(acc_ptr + offs, x, mask=offs < N - 1)
    tl.atomic_max(mx_ptr + offs, x)
    tl.atomic_min(mx_ptr + N + offs, x)
    tl.atomic_or(cnt_ptr + 1, 1 << pid)
    tl.atomic_xchg(cnt_ptr + 2, 7)
    prev = tl.atomic_cas(cnt_ptr + 3, 0, pid + 100)
    tl.atomic_add(cnt_ptr + 4, tl.where(prev == 0, 1, 0))
    tl.atomic_and(cnt_ptr + 5, ~(1 << pid))
    tl.atomic_xor(cnt_ptr + 6, pid)


@pytest.mark.parametrize("tgt", TARGETS)
def test_atomics_return_old_values_and_honour_masks(tgt):
    P, N = 5, 8
    cnt = torch.tensor([0, 0, 0, 0, 0, -1, 0], dtype=torch.int32)
    acc = torch.zeros(N)
    old = torch.zeros(P, dtype=torch.int32)
    mx = torch.cat([torch.full((N,), -1e9), torch.full((N,), 1e9)])
    x = torch.randint(-8, 8, (P, N), generator=torch.Generator().manual_seed(0)).float()   # exact sums
    with compiler.use_target(tgt):
        atomics_kernel[(P,)](cnt, acc, old, mx, x, N)
    assert sorted(old.tolist()) == list(range(P))          # every program saw a distinct old count
    assert torch.equal(acc[:N - 1], x.sum(0)[:N - 1]) and acc[N - 1] == 0
    assert torch.equal(mx[:N], x.max(0).values) and torch.equal(mx[N:], x.min(0).values)
    assert cnt.tolist()[:3] == [P, 31, 7]
    assert 100 <= int(cnt[3]) < 100 + P and int(cnt[4]) == 1   # exactly one cas succeeded
    assert int(cnt[5]) == ~31 and int(cnt[6]) == 0 ^ 1 ^ 2 ^ 3 ^ 4


@kernel
def locked_sum_kernel(lock_ptr, total_ptr, x_ptr):
    pid = tl.program_id(0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(total_ptr, tl.load(total_ptr) + tl.load(x_ptr + pid))
    tl.atomic_xchg(lock_ptr, 0)


@pytest.mark.parametrize("tgt", ["cpu", "gpu:interpret"])
def test_spin_lock_from_cas_and_xchg(tgt):
    x = torch.arange(16, dtype=torch.int32)
    lock, total = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    with compiler.use_target(tgt):
        locked_sum_kernel[(16,)](lock, total, x)
    assert int(total) == 120 and int(lock) == 0


@kernel
def float_add_kernel(acc_ptr, x_ptr):
    tl.atomic_add(acc_ptr, tl.load(x_ptr))


@kernel
def int_add_kernel(acc_ptr, x_ptr):
    tl.atomic_add(acc_ptr, tl.load(x_ptr))


def test_strict_refuses_float_atomic_add_and_accepts_integer_atomics():
    with compiler.numerics("strict"), pytest.raises(CompilationError, match="atomic_add of floating-point"):
        float_add_kernel[(2,)](torch.zeros(1), torch.ones(1))
    acc = torch.zeros(1, dtype=torch.int32)
    with compiler.numerics("strict"):
        int_add_kernel[(3,)](acc, torch.ones(1, dtype=torch.int32))
    assert int(acc) == 3


@kernel
def print_kernel(x_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.device_print("x=", x)
    tl.device_print("bits ", x.to(tl.int32, bitcast=True), hex=True)


def test_device_print_on_cpu(capfd):
    print_kernel[(1,)](torch.tensor([1.5, -2.0]), 2)
    out = capfd.readouterr().out
    assert "pid (0, 0, 0) idx (0) x=1.5" in out and "idx (1) x=-2" in out
    assert "bits 0x3fc00000" in out


@pytest.mark.no_toolchain
def test_device_print_renders_on_gpu_and_not_on_kunlun():
    with compiler.use_target("gpu:interpret"), compiler.render_only() as seen:
        print_kernel[(1,)](torch.zeros(2), 2)
    assert "tl.device_print('x=', " in seen[0].source
    with compiler.use_target("kunlun:xpu3"), compiler.render_only() as seen:
        print_kernel[(1,)](torch.zeros(2), 2)
    assert "printf" not in seen[0].source and "does not print" in seen[0].source


@kernel
def assert_kernel(x_ptr, n, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.device_assert(x >= 0, "inputs must be non-negative", mask=offs < n)
    assert n < 100, "n is too large"


def test_device_assert_raises_at_the_assert_line_on_cpu():
    assert_kernel[(1,)](torch.ones(4), 3, 4)                 # passes
    with pytest.raises(DeviceAssertionError) as info:
        assert_kernel[(2,)](torch.tensor([1.0, -1.0, 2.0, 3.0]), 4, 4)
    msg = str(info.value)
    assert "inputs must be non-negative" in msg and "test_atomics_debug.py" in msg
    assert "tl.device_assert(x >= 0" in msg and "assert_kernel" in msg
    with pytest.raises(DeviceAssertionError, match="n is too large"):
        assert_kernel[(1,)](torch.ones(4), 200, 4)
    assert_kernel[(1,)](torch.ones(4), 3, 4)                 # the failure does not stick


@pytest.mark.emulation
def test_device_assert_in_kunlun_emulation_and_gpu_source():
    with compiler.use_target("kunlun:xpu3"), pytest.raises(KunlunLaunchError, match="inputs must be non-negative"):
        assert_kernel[(1,)](torch.tensor([1.0, -1.0, 2.0, 3.0]), 4, 4)
    with compiler.use_target("gpu:interpret"), compiler.render_only() as seen:
        assert_kernel[(1,)](torch.ones(4), 3, 4)
    assert "tl.device_assert(" in seen[0].source and "'n is too large'" in seen[0].source


def test_atomics_and_debugging_compile_for_sm_90_without_a_gpu():
    with compiler.use_target("gpu:sm_90"), compiler.compile_only() as built:
        atomics_kernel[(1,)](torch.zeros(7, dtype=torch.int32), torch.zeros(8), torch.zeros(1, dtype=torch.int32),
                             torch.zeros(16), torch.zeros(8), 8)
        locked_sum_kernel[(1,)](torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                                torch.zeros(1, dtype=torch.int32))
        print_kernel[(1,)](torch.zeros(2), 2)
        assert_kernel[(1,)](torch.zeros(4), 3, 4)
    assert len(built) == 4 and all(b is not None for b in built)
