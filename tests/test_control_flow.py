"""Scalar run-time control flow on every target (cpu, kunlun:xpu3 host emulation, gpu:interpret):
if/elif/else with values used after it, an early return at any depth outside loops, while loops
with carried values, conditional expressions, short-circuit and/or/not, and run-time for loops
(int64 bounds, a step of 0). Strict outputs are bitwise equal to cpu's; the IR has one structured
`if` / `while` op each, printed and verified."""
from __future__ import annotations

import pytest
from tiers import on_targets
import torch

import compiler
import targets.kunlun
from compiler import CompilationError, kernel, language as tl
from compiler.frontend import ArgSpec, build_function
from compiler.ir import print_function, verify
from compiler.target import register_target

pytestmark = pytest.mark.compile

register_target("kunlun", targets.kunlun.TARGET)
TARGETS = on_targets("cpu", "kunlun:xpu3", "gpu:interpret")


@kernel
def branches_kernel(x_ptr, out_ptr, flags_ptr, lo, BLOCK: tl.constexpr):
    """if / elif / else on a loaded scalar; a tile, a scalar and a pointer assigned in the branches."""
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid * BLOCK)
    offs = tl.arange(0, BLOCK)
    dst = out_ptr
    if v > 0:
        y = tl.load(x_ptr + pid * BLOCK + offs) * 2.0
        tag = 1
    elif v < lo and not (pid == 3):
        y = tl.zeros((BLOCK,), tl.float32) + v
        tag = 2
        dst = out_ptr + 0
    else:
        y = tl.full((BLOCK,), 7.0, tl.float32)
        tag = 3.5
    tl.store(dst + pid * BLOCK + offs, y)
    tl.store(flags_ptr + pid, tag)
    tl.store(flags_ptr + 8 + pid, 10.0 if tag > 2 else -10.0)


@kernel
def _helper_abs(x):
    if x < 0:
        return -x
    return x


@kernel
def early_return_kernel(lab_ptr, out_ptr, ignore, n_cols, HAS_LABEL: tl.constexpr, BLOCK: tl.constexpr):
    """An early return inside a constexpr if, inside a run-time if, after a loop; a helper that
    returns from a run-time branch."""
    pid = tl.program_id(0)
    row = out_ptr + pid * n_cols
    lab = tl.load(lab_ptr + pid)
    if HAS_LABEL:
        if lab != 0:
            if lab == ignore:
                for c in range(0, n_cols, BLOCK):
                    offs = c + tl.arange(0, BLOCK)
                    tl.store(row + offs, -1.0, mask=offs < n_cols)
                return
            tl.store(row, 100.0)
    acc = 0.0
    for c in range(0, n_cols, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        acc += tl.sum(tl.where(offs < n_cols, 1.0, 0.0))
    tl.store(row + 1, acc + _helper_abs(lab).to(tl.float32))


@kernel
def while_kernel(x_ptr, out_ptr, n, limit, BLOCK: tl.constexpr):
    """while with carried scalars and a tile, a condition with a short-circuit load guard."""
    i = 0
    s = 0.0
    t = tl.zeros((BLOCK,), tl.float32)
    while i < n and tl.load(x_ptr + i) < limit:
        s += tl.load(x_ptr + i)
        t = t + i
        i += 1
    tl.store(out_ptr, s)
    tl.store(out_ptr + 1, i.to(tl.float32))
    tl.store(out_ptr + 2 + tl.arange(0, BLOCK), t)


@kernel
def for_bounds_kernel(out_ptr, bounds_ptr, big):
    """Run-time bounds (loaded, so that one specialisation serves every case): a step of 0 runs
    nothing (an error on the cpu target), negative steps count down, int64 bounds count in 64 bits."""
    lo, hi, step = tl.load(bounds_ptr), tl.load(bounds_ptr + 1), tl.load(bounds_ptr + 2)
    n = 0
    for i in range(lo, hi, step):
        n += 1
    tl.store(out_ptr, n)
    m = 0
    for j in range(big, big + 3 * 1024, 1024):
        m += 1
    tl.store(out_ptr + 1, m)


def _run_branches(tgt, policy):
    x = torch.tensor([[1.0, 2, 3, 4], [-3.0, 0, 0, 0], [-0.5, 1, 1, 1], [-5.0, 9, 9, 9]])
    out = torch.full((4, 4), -99.0)
    flags = torch.zeros(16)
    with compiler.use_target(tgt), compiler.numerics(policy):
        branches_kernel[(4,)](x, out, flags, -1.0, BLOCK=4)
    return out, flags


@pytest.mark.parametrize("tgt", TARGETS)
def test_if_elif_else_values_after_the_branches(tgt):
    out, flags = _run_branches(tgt, "fast")
    assert torch.equal(out[0], torch.tensor([2.0, 4, 6, 8]))
    assert torch.equal(out[1], torch.full((4,), -3.0))
    assert torch.equal(out[2], torch.full((4,), 7.0))
    assert torch.equal(out[3], torch.full((4,), 7.0))     # `not (pid == 3)` is false there
    assert flags[:4].tolist() == [1.0, 2.0, 3.5, 3.5]
    assert flags[8:12].tolist() == [-10.0, -10.0, 10.0, 10.0]


@pytest.mark.parametrize("tgt", TARGETS)
def test_early_return_at_any_depth(tgt):
    lab = torch.tensor([0, 5, 3, -2], dtype=torch.int32)
    n_cols = 21
    out = torch.zeros(4, n_cols)
    with compiler.use_target(tgt):
        early_return_kernel[(4,)](lab, out, 5, n_cols, HAS_LABEL=True, BLOCK=8)
    assert torch.equal(out[1], torch.full((n_cols,), -1.0))          # returned early, rest skipped
    assert out[0, :2].tolist() == [0.0, 21.0]
    assert out[2, :2].tolist() == [100.0, 24.0]
    assert out[3, :2].tolist() == [100.0, 23.0]                     # the helper's run-time return
    out2 = torch.zeros(4, n_cols)
    with compiler.use_target(tgt):
        early_return_kernel[(4,)](lab, out2, 5, n_cols, HAS_LABEL=False, BLOCK=8)
    assert out2[1, :2].tolist() == [0.0, 26.0]


@pytest.mark.parametrize("tgt", TARGETS)
def test_while_loop_and_short_circuit_guard(tgt):
    # the guard `i < n and tl.load(x_ptr + i) ...` must not read past the 5 elements (the kunlun
    # emulation's DMA bounds check would raise)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    out = torch.zeros(2 + 4)
    with compiler.use_target(tgt):
        while_kernel[(1,)](x, out, 5, 100.0, BLOCK=4)
    assert out[:2].tolist() == [15.0, 5.0]
    assert torch.equal(out[2:], torch.full((4,), 10.0))
    with compiler.use_target(tgt):
        while_kernel[(1,)](x, out, 5, 3.5, BLOCK=4)
    assert out[:2].tolist() == [6.0, 3.0]


@pytest.mark.parametrize("tgt", TARGETS)
def test_runtime_for_bounds(tgt):
    out = torch.zeros(2, dtype=torch.int32)
    big = 2 ** 31 - 4096 if tgt.startswith("kunlun") else 2 ** 40   # kunlun: 32-bit integer arguments
    cases = [((0, 10, 3), 4), ((10, 0, -3), 4), ((0, 10, 0), 0), ((5, 5, 1), 0), ((-7, -1, 2), 3),
             ((-2 ** 31, 2 ** 31 - 1, 2 ** 30), 4), ((2 ** 31 - 1, -2 ** 31, -(2 ** 30)), 4)]   # no overflow
    for (lo, hi, st), want in cases:
        if st == 0 and tgt == "cpu":   # the cpu target reports a run-time step of 0 as an error
            with compiler.use_target(tgt), pytest.raises(compiler.KernelArgumentError, match="step of 0"):
                for_bounds_kernel[(1,)](out, torch.tensor([lo, hi, st], dtype=torch.int32), big)
            continue
        with compiler.use_target(tgt):
            for_bounds_kernel[(1,)](out, torch.tensor([lo, hi, st], dtype=torch.int32), big)
        assert out.tolist() == [want, 3], (lo, hi, st)


@pytest.mark.emulation
@pytest.mark.parametrize("tgt", ["kunlun:xpu3", "gpu:interpret"])
def test_strict_control_flow_is_bitwise_equal_to_cpu(tgt):
    ref = _run_branches("cpu", "strict")
    got = _run_branches(tgt, "strict")
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
    x = torch.randn(64, generator=torch.Generator().manual_seed(3)).abs()
    outs = []
    for t in ("cpu", tgt):
        o = torch.zeros(6)
        with compiler.use_target(t), compiler.numerics("strict"):
            while_kernel[(1,)](x, o, 64, 1.5, BLOCK=4)
        outs.append(o)
    assert torch.equal(outs[0], outs[1])


def _ir(fn, specs):
    f = build_function(fn, fn.__name__, specs, {})
    verify(f)
    return print_function(f)


@pytest.mark.no_toolchain
def test_ir_has_structured_if_and_while_ops():
    specs = [ArgSpec("x_ptr", "tensor", dtype=compiler.language.pointer_type(tl.float32)),
             ArgSpec("out_ptr", "tensor", dtype=compiler.language.pointer_type(tl.float32)),
             ArgSpec("n", "scalar", dtype=tl.int32), ArgSpec("limit", "scalar", dtype=tl.float32),
             ArgSpec("BLOCK", "constexpr", value=4)]
    text = _ir(while_kernel.fn, specs)
    assert "= while (" in text and "} do (" in text
    assert " = if " in text and "} else {" in text        # the short-circuit `and` guards the load
    assert text.count("yield") >= 4


@pytest.mark.no_toolchain
def test_if_results_must_agree_in_shape():
    def bad(x_ptr, n):
        if n > 0:
            y = tl.zeros((4,), tl.float32)
        else:
            y = tl.zeros((8,), tl.float32)
        tl.store(x_ptr + tl.arange(0, 4), y)
    with pytest.raises(CompilationError, match="'y' has shape"):
        kernel(bad)[(1,)](torch.zeros(8), 3)


@pytest.mark.no_toolchain
def test_return_inside_a_loop_is_refused_with_the_alternative():
    def bad(x_ptr, n):
        for i in range(n):
            if i > 2:
                return
        tl.store(x_ptr, 1.0)
    with pytest.raises(CompilationError, match="'return' inside a loop is not supported"):
        kernel(bad)[(1,)](torch.zeros(1), 3)


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_control_flow_compiles_for_sm_90_without_a_gpu(policy):
    x4 = torch.zeros(4, 4)
    with compiler.use_target("gpu:sm_90"), compiler.numerics(policy), compiler.compile_only() as built:
        branches_kernel[(4,)](x4, x4, torch.zeros(16), -1.0, BLOCK=4)
        early_return_kernel[(4,)](torch.zeros(4, dtype=torch.int32), torch.zeros(4, 8), 5, 8, HAS_LABEL=True,
                                  BLOCK=8)
        while_kernel[(1,)](torch.zeros(5), torch.zeros(6), 5, 3.5, BLOCK=4)
        for_bounds_kernel[(1,)](torch.zeros(2, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), 2 ** 40)
    assert len(built) == 4 and all(b is not None for b in built)
