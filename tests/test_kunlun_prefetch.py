"""Double-buffered loads on kunlun (targets/kunlun/codegen/prefetch.py): a loop's tile is fetched
one iteration ahead with GM2LM_ASYNC into a second LM slot and waited for by the mfence() that ends
the body. Checked in host emulation: the results (bitwise those of cpu in strict), the lint, the
emulation's failure when the wait is taken out, the LM-fit fallback and the loads left alone."""
import re

import pytest
import torch

import kernels
import targets.kunlun
from compiler import kernel, language as tl, numerics, render_only, use_target
from compiler.target import register_target
from targets.kunlun.codegen import lint as L
from targets.kunlun.plan.model import DMA, NOMINAL_TRIPS

from test_kunlun_fidelity import _run_source

pytestmark = pytest.mark.emulation

register_target("kunlun", targets.kunlun.TARGET)
_AHEAD = "fetched one loop iteration ahead into a second LM slot"


@kernel
def _scaled_rows(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[r] = x[r] * sum(x[r]), over chunks of BLOCK: two loops that each read x chunk by chunk."""
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
    s = tl.sum(acc, axis=0)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
        tl.store(out_ptr + row * n + cols, x * s, mask=cols < n)


def _source(fn, grid, *args, arch="xpu3", policy="fast", **meta):
    with use_target(f"kunlun:{arch}"), numerics(policy), render_only() as seen:
        fn[grid](*args, **meta)
    return seen[0].source


@pytest.mark.sampled
@pytest.mark.parametrize("policy", ["fast", "strict"])
@pytest.mark.parametrize("n", [1000, 1024, 100])   # a masked tail, whole chunks, one masked chunk
def test_prefetched_loops_match_cpu(policy, n):
    x, rows = torch.randn(6, n, generator=torch.Generator().manual_seed(n)), 6
    src = _source(_scaled_rows, (rows,), x, torch.empty_like(x), n, policy=policy, BLOCK=128)
    assert f"2 {_AHEAD}" in src and len(re.findall(r"GM2LM_ASYNC\([^,]+, next\d+,", src)) == 2
    assert L.lint(src) == []
    out = {}
    for target in ("kunlun:xpu3", "kunlun:xpu2", "cpu"):
        y = torch.empty_like(x)
        with use_target(target), numerics(policy):
            _scaled_rows[(rows,)](x, y, n, BLOCK=128)
        out[target] = y
    torch.testing.assert_close(out["cpu"], x * x.sum(1, keepdim=True), rtol=1e-4, atol=1e-4)
    if policy == "strict":
        assert torch.equal(out["kunlun:xpu3"], out["cpu"]) and torch.equal(out["kunlun:xpu2"], out["cpu"])
    else:
        torch.testing.assert_close(out["kunlun:xpu3"], out["cpu"], rtol=1e-4, atol=1e-4)   # other sum orders


def _without_the_wait(src: str) -> str:
    """`src` with the `mfence();` that ends each prefetching loop's body taken out."""
    lines = src.split("\n")
    drop = []
    for k in re.findall(r"next\d+ = \w+ \+ \(\((\w+) \+ 1\) & 1\)", src):
        head = next(i for i, ln in enumerate(lines) if re.search(rf"for \(\w+ {k} = 0;", ln))
        depth = 0
        for j in range(head, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            if depth == 0:
                assert lines[j - 1].strip() == "mfence();"
                drop.append(j - 1)
                break
    return "\n".join(ln for i, ln in enumerate(lines) if i not in drop)


@pytest.mark.no_toolchain
def test_the_wait_that_ends_the_body_is_needed(tmp_path):
    """Without the body's closing mfence() the lint names `prefetch-wait` and the emulation fails
    on the first read of a tile still in flight."""
    n = 1000
    x, out = torch.randn(1, n), torch.empty(1, n)   # one row: the launch passes x.numel() as n
    src = _source(_scaled_rows, (1,), x, out, n, BLOCK=128)
    rc, err = _run_source(src, tmp_path, "waited", x, out, 1)
    assert rc == 0, err
    assert torch.allclose(out, x * x.sum(1, keepdim=True), rtol=1e-4, atol=1e-4)
    bare = _without_the_wait(src)
    assert bare != src and {r for r, _ in L.lint(bare)} == {"prefetch-wait"}
    rc, err = _run_source(bare, tmp_path, "unwaited", x, out, 1)
    assert rc == -1 and "no fence between" in err, err   # the next slot still read, or still landing


@kernel
def _sum_chunks(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0))
    tl.store(out_ptr + row, acc)


def test_a_second_slot_that_does_not_fit_lm_is_not_taken():
    """xpu2's arena is 7 KB: a 1024-float chunk (4 KB) fits once, not twice. The plan keeps one
    slot (no cut, no prefetch) and the kernel still runs; 512 floats fit twice and are prefetched."""
    x = torch.randn(3, 5000)
    for block, ahead in ((1024, False), (512, True)):
        src = _source(_sum_chunks, (3,), x, torch.empty(3), 5000, arch="xpu2", BLOCK=block)
        assert (_AHEAD in src) is ahead and "strip-mined" not in src, block
        out = torch.empty(3)
        with use_target("kunlun:xpu2"), numerics("fast"):
            _sum_chunks[(3,)](x, out, 5000, BLOCK=block)
        torch.testing.assert_close(out, x.sum(1), rtol=1e-4, atol=1e-3)


@kernel
def _running_sum(x_ptr, n, BLOCK: tl.constexpr):
    """x[i] += x[i - BLOCK] chunk after chunk: each iteration reads what the one before wrote."""
    for off in range(BLOCK, n, BLOCK):
        prev = tl.load(x_ptr + off - BLOCK + tl.arange(0, BLOCK))
        here = tl.load(x_ptr + off + tl.arange(0, BLOCK))
        tl.store(x_ptr + off + tl.arange(0, BLOCK), here + prev)


@kernel
def _advancing(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Triton's advancing pointer (the plan carries it as a scalar offset with a fixed step)."""
    ptrs = x_ptr + tl.program_id(0) * n + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(0, n, BLOCK):
        acc += tl.load(ptrs)
        ptrs += BLOCK
    tl.store(out_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), acc)


@kernel
def _doubling(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A carried offset that does not advance by a fixed step: its next value is not known early."""
    o = tl.program_id(0) * 0
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(0, n):
        acc += tl.load(x_ptr + o + tl.arange(0, BLOCK))
        o = o * 2 + BLOCK
    tl.store(out_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), acc)


def test_advancing_pointers_are_fetched_ahead():
    x = torch.randn(3, 64 * 8)
    src = _source(_advancing, (3,), x, torch.empty(3, 64), 64 * 8, BLOCK=64)
    assert f"1 {_AHEAD}" in src and L.lint(src) == []
    out = torch.empty(3, 64)
    with use_target("kunlun:xpu3"), numerics("fast"):
        _advancing[(3,)](x, out, 64 * 8, BLOCK=64)
    torch.testing.assert_close(out, x.view(3, 8, 64).sum(1), rtol=1e-5, atol=1e-5)


def test_loads_that_cannot_be_fetched_early_are_left_alone():
    x = torch.randn(64 * 8)
    src = _source(_running_sum, (1,), x.clone(), 64 * 8, BLOCK=64)
    assert _AHEAD not in src and "_ASYNC" not in src
    y = x.clone()
    with use_target("kunlun:xpu3"), numerics("fast"):
        _running_sum[(1,)](y, 64 * 8, BLOCK=64)
    torch.testing.assert_close(y, x.view(8, 64).cumsum(0).view(-1), rtol=1e-5, atol=1e-5)
    x = torch.randn(64 * 16)
    src = _source(_doubling, (1,), x, torch.empty(64), 4, BLOCK=64)
    assert _AHEAD not in src and "_ASYNC" not in src
    out = torch.empty(64)
    with use_target("kunlun:xpu3"), numerics("fast"):
        _doubling[(1,)](x, out, 4, BLOCK=64)
    rows = x.view(16, 64)
    torch.testing.assert_close(out, rows[0] + rows[1] + rows[3] + rows[7], rtol=1e-5, atol=1e-5)


def test_library_norm_prefetches_its_rows_and_keeps_cpu_bits():
    """rms_norm's two passes over a row read x chunk by chunk: both are fetched ahead, and strict
    kunlun is bitwise cpu."""
    x, w = torch.randn(4, 700), torch.randn(700)
    with use_target("kunlun:xpu2"), numerics("strict"), render_only() as seen:
        kernels.rms_norm(x, w, config={"BLOCK": 128})
    assert f"2 {_AHEAD}" in seen[0].source and L.lint(seen[0].source) == []
    with use_target("kunlun:xpu2"), numerics("strict"):
        out = kernels.rms_norm(x, w, config={"BLOCK": 128})
    with use_target("cpu"), numerics("strict"):
        ref = kernels.rms_norm(x, w, config={"BLOCK": 128})
    assert torch.equal(out, ref)


@kernel
def _gathered_rows(x_ptr, table_ptr, out_ptr, n, R: tl.constexpr, D: tl.constexpr):
    """Rows picked through a table, R at a time (a paged cache's block table): the table's entries
    for the next iteration are loaded ahead with the rows they address."""
    pid = tl.program_id(0)
    acc = tl.zeros([R, D], dtype=tl.float32)
    for i in range(0, n, R):
        rows = tl.load(table_ptr + pid * n + i + tl.arange(0, R))
        acc += tl.load(x_ptr + rows[:, None] * D + tl.arange(0, D)[None, :])
    tl.store(out_ptr + pid * R * D + tl.arange(0, R)[:, None] * D + tl.arange(0, D)[None, :], acc)


@pytest.mark.parametrize("policy", ["fast", "strict"])
def test_rows_addressed_through_a_table_are_fetched_ahead(policy):
    x, n, r, d = torch.randn(50, 32), 24, 4, 32
    table = torch.randint(0, 50, (3, n), dtype=torch.int32)
    src = _source(_gathered_rows, (3,), x, table, torch.empty(3, r, d), n, policy=policy, R=r, D=d)
    assert f"2 {_AHEAD}" in src and L.lint(src) == []   # the table's entries (contiguous) and the rows
    outs = []
    for target in ("kunlun:xpu2", "cpu"):
        out = torch.empty(3, r, d)
        with use_target(target), numerics(policy):
            _gathered_rows[(3,)](x, table, out, n, R=r, D=d)
        outs.append(out)
    torch.testing.assert_close(outs[1], x[table.long()].view(3, n // r, r, d).sum(1), rtol=1e-5, atol=1e-5)
    assert torch.equal(outs[0], outs[1]) if policy == "strict" else torch.allclose(outs[0], outs[1], atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("arch", ["xpu2", "xpu3"])
def test_half_rows_are_fetched_raw_and_widened_after_the_wait(dtype, arch):
    """fp16/bf16 rows fetched ahead land raw and are widened where the next iteration takes them
    (a masked tail is converted as it is copied): bitwise the cpu target in strict."""
    n = 1000
    x = torch.randn(3, n).to(dtype)
    src = _source(_scaled_rows, (3,), x, torch.empty_like(x), n, arch=arch, policy="strict", BLOCK=128)
    assert f"2 {_AHEAD}" in src and "tj_widen_" in src and L.lint(src) == []
    outs = []
    for target in (f"kunlun:{arch}", "cpu"):
        y = torch.empty_like(x)
        with use_target(target), numerics("strict"):
            _scaled_rows[(3,)](x, y, n, BLOCK=128)
        outs.append(y)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.no_toolchain
def test_the_cost_model_prices_a_tile_fetched_ahead_without_a_wait():
    """A site fetched ahead in a loop of 8 trips moves 7 tiles (the last iteration fetches nothing)
    and the core waits for none of them; the same site as a plain batch waits once a tile."""
    batch = DMA("GM2LM", "x", 4, 128, 4, static_trips=8, runtime_loops=0, time=0, batched=True)
    ahead = DMA("GM2LM", "x", 4, 128, 4, static_trips=8, runtime_loops=0, time=0, batched=True, ahead_in=8)
    assert batch.bytes_per_run(NOMINAL_TRIPS) == 4 * 128 * 4 * 8 and batch.waits_per_run(NOMINAL_TRIPS) == 8
    assert ahead.bytes_per_run(NOMINAL_TRIPS) == 4 * 128 * 4 * 7 and ahead.waits_per_run(NOMINAL_TRIPS) == 0
    runtime = DMA("GM2LM", "x", 4, 128, 1, static_trips=1, runtime_loops=1, time=0, batched=True, ahead_in=0)
    assert runtime.count_per_run(NOMINAL_TRIPS) == NOMINAL_TRIPS - 1
