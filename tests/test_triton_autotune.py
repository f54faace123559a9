"""triton.autotune / triton.heuristics through the front door: measured on cpu and stored, reused
by a second process without measuring, unbuildable configs pruned with a note, reset_to_zero and
restore_value between timing runs, the unmeasured choice on kunlun, heuristics at launch."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from compiler import kernel, triton, use_target
from compiler.autotune import MEASURE_COUNT
from compiler.errors import CompilationError, KernelArgumentError
from compiler.triton import Config, language as tl
from compiler.triton.tuning import op_name

pytestmark = pytest.mark.compile

REPO = pathlib.Path(__file__).resolve().parents[1]


def _scale_fn(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0, mask=m)


def _tuned(configs, **kw):
    # a fresh Autotuner over the same kernel source each time (the store is keyed by name + source)
    return triton.autotune(configs=configs, key=["n"], **kw)(triton.jit(_scale_fn))


def _grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


BLOCKS = [Config({"BLOCK": b}, num_warps=w) for b, w in ((16, 2), (32, 4), (64, 8))]


def _store(d, op):
    files = list((pathlib.Path(d) / "autotune").glob(f"{op}.cpu.*.fast.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_autotune_measures_each_config_on_cpu_and_stores_the_winner(tcache):
    k = _tuned(BLOCKS)
    x, y = torch.randn(100), torch.zeros(100)
    before = MEASURE_COUNT["n"]
    k[_grid](x, y, 100)
    assert MEASURE_COUNT["n"] - before == 3
    torch.testing.assert_close(y, x * 2)
    assert k.best_config in BLOCKS
    doc = _store(tcache, op_name(k.base))
    assert doc["op"] == f"{__name__}._scale_fn"
    (entry,) = doc["entries"].values()
    assert all(r["status"] == "ok" and r["time_s"] > 0 for r in entry["results"].values())
    assert entry["winner_config"] == k.best_config.all_kwargs()
    # the same key again: no tuning; another key: tuned again
    k[_grid](x, y, 100)
    assert MEASURE_COUNT["n"] - before == 3
    k[_grid](x[:50], y[:50], 50)
    assert MEASURE_COUNT["n"] - before == 6


def test_key_decides_the_config_not_the_batch(tcache):
    @triton.autotune(configs=BLOCKS[:2], key=["n_cols"])
    @triton.jit
    def rows_scale(x, y, n_rows, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        for c in range(0, n_cols, BLOCK):
            m = c + offs < n_cols
            tl.store(y + row * n_cols + c + offs, tl.load(x + row * n_cols + c + offs, mask=m) + 1.0, mask=m)

    x = torch.randn(8, 40)
    y = torch.zeros_like(x)
    rows_scale[(8,)](x, y, 8, 40)
    first, before = rows_scale.best_config, MEASURE_COUNT["n"]
    x2 = torch.randn(3, 40)
    y2 = torch.zeros_like(x2)
    rows_scale[(3,)](x2, y2, 3, 40)   # another batch size, same key: same config, no tuning
    assert MEASURE_COUNT["n"] == before and rows_scale.best_config is first
    torch.testing.assert_close(y2, x2 + 1)


_SECOND_PROCESS = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {repo!r})
    from compiler import triton
    from compiler.triton import Config, language as tl
    from compiler.autotune import MEASURE_COUNT

    @triton.autotune(configs=[Config({{"BLOCK": 16}}), Config({{"BLOCK": 32}}), Config({{"BLOCK": 64}})], key=["n"])
    @triton.jit
    def twice(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0, mask=m)

    x, y = torch.randn(200), torch.zeros(200)
    twice[lambda meta: (triton.cdiv(200, meta["BLOCK"]),)](x, y, 200)
    assert torch.equal(y, x * 2)
    print("measured", MEASURE_COUNT["n"], "best", twice.best_config.kwargs["BLOCK"])
""")


@pytest.mark.integration
def test_second_process_reuses_the_decision_without_tuning(tmp_path):
    script = tmp_path / "tuned_script.py"
    script.write_text(_SECOND_PROCESS.format(repo=str(REPO)))
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache"), "TILEJIT_TARGET": "cpu"}

    def run():
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    first, second = run(), run()
    assert first[:2] == ["measured", "3"]
    assert second[:2] == ["measured", "0"] and second[3] == first[3]


def test_unbuildable_config_is_pruned_with_a_note(tcache):
    @triton.jit
    def small_only(x, y, n, BLOCK: tl.constexpr):
        tl.static_assert(BLOCK <= 32, "BLOCK too large for this kernel")
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=m) + 1.0, mask=m)

    k = triton.autotune(configs=[Config({"BLOCK": 128}), Config({"BLOCK": 16})], key=["n"])(small_only)
    x, y = torch.randn(64), torch.zeros(64)
    with pytest.warns(triton.AutotuneNote, match="BLOCK=128.*BLOCK too large"):
        k[_grid](x, y, 64)
    assert k.best_config.kwargs == {"BLOCK": 16}
    torch.testing.assert_close(y, x + 1)
    (entry,) = _store(tcache, op_name(k.base))["entries"].values()
    rejected = [r for r in entry["results"].values() if r["status"] == "rejected"]
    assert len(rejected) == 1 and "BLOCK too large" in rejected[0]["reason"]

    none = triton.autotune(configs=[Config({"BLOCK": 64}), Config({"BLOCK": 128})], key=["n"])(small_only)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", triton.AutotuneNote)
        with pytest.raises(CompilationError, match="(?s)no config builds.*BLOCK too large"):
            none[_grid](x, y, 64)


def test_reset_to_zero_and_restore_value_between_timing_runs(tcache):
    @triton.jit
    def accumulate(x, acc, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(acc + offs, tl.load(acc + offs, mask=m) + tl.load(x + offs, mask=m), mask=m)

    x = torch.randn(64)
    # cache_results=False: each autotuner tunes for itself (a stored decision would skip the timing runs)
    before = MEASURE_COUNT["n"]
    acc = torch.zeros(64)
    reset = triton.autotune(configs=BLOCKS[:2], key=["n"], reset_to_zero=["acc"], cache_results=False)(accumulate)
    reset[_grid](x, acc, 64)      # tuning ran it many times; acc was zeroed before each run and the real one
    torch.testing.assert_close(acc, x)

    start = torch.full((64,), 5.0)
    acc = start.clone()
    restore = triton.autotune(configs=BLOCKS[:2], key=["n"], restore_value=["acc"], cache_results=False)(accumulate)
    restore[_grid](x, acc, 64)
    torch.testing.assert_close(acc, start + x)

    acc = torch.zeros(64)   # without either, the timing runs' sums are left in acc
    plain = triton.autotune(configs=BLOCKS[:2], key=["n"], cache_results=False)(accumulate)
    plain[_grid](x, acc, 64)
    assert not torch.allclose(acc, x)
    assert MEASURE_COUNT["n"] - before == 6


def test_prune_configs_by_early_prune_and_perf_model(tcache):
    seen = {}

    def early(configs, named, **kwargs):
        seen["named"] = sorted(named)
        return [c for c in configs if c.kwargs["BLOCK"] != 64]

    def perf_model(**kw):
        return -kw["BLOCK"]   # claims the biggest block is fastest

    k = _tuned(BLOCKS, prune_configs_by={"early_config_prune": early, "perf_model": perf_model, "top_k": 1})
    before = MEASURE_COUNT["n"]
    x, y = torch.randn(70), torch.zeros(70)
    k[_grid](x, y, 70)
    assert seen["named"] == ["n", "x", "y"]
    assert MEASURE_COUNT["n"] - before == 1 and k.best_config.kwargs == {"BLOCK": 32}
    torch.testing.assert_close(y, x * 2)


def test_cache_results_false_keeps_the_decision_in_process(tcache):
    k = _tuned(BLOCKS[:2], cache_results=False)
    x, y = torch.randn(30), torch.zeros(30)
    k[_grid](x, y, 30)
    assert k.best_config in BLOCKS[:2]
    assert not (tcache / "autotune").exists() or not list((tcache / "autotune").glob("*_scale_fn*"))


@pytest.mark.emulation
def test_unmeasured_target_takes_first_config_that_renders_and_labels_it(tcache):
    # kunlun's timings in host emulation are not its speed: nothing is timed; the 64K-element
    # prefix sum, needed whole after its own max, does not fit its local memory (a scan is cut into
    # chunks, but not one whose every value is read again after a reduction over all of them) and
    # is pruned by the renderer's own budget check
    @triton.jit
    def prefix_sum(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        s = tl.cumsum(tl.load(x + offs, mask=m, other=0.0), 0)
        tl.store(y + offs, s - tl.max(s, 0), mask=m)

    configs = [Config({"BLOCK": 65536}), Config({"BLOCK": 64}), Config({"BLOCK": 32})]
    x, y = torch.randn(50), torch.zeros(50)
    with use_target("kunlun:xpu3"):
        k = triton.autotune(configs=configs, key=["n"])(prefix_sum)
        before = MEASURE_COUNT["n"]
        with pytest.warns(triton.AutotuneNote, match="BLOCK=65536"):
            k[_grid](x, y, 50)
        assert MEASURE_COUNT["n"] == before and k.best_config.kwargs == {"BLOCK": 64}
        torch.testing.assert_close(y, torch.cumsum(x, 0) - torch.cumsum(x, 0).max())
        files = list((tcache / "autotune").glob("*prefix_sum.kunlun_xpu3.*.json"))
        (entry,) = json.loads(files[0].read_text())["entries"].values()
        ok = {k2: r for k2, r in entry["results"].items() if r["status"] == "ok"}
        assert [r["config"]["BLOCK"] for r in ok.values()] == [64]
        assert [r["config"]["BLOCK"] for r in entry["results"].values() if r["status"] == "rejected"] == [65536]
        assert all(r["unmeasured"] and r["time_s"] is None for r in ok.values())
        # another autotuner over the same kernel (a new process would do the same): found, not re-rendered
        again = triton.autotune(configs=configs, key=["n"])(prefix_sum)
        with warnings.catch_warnings():
            warnings.simplefilter("error", triton.AutotuneNote)
            again[_grid](x, y, 50)
        assert again.best_config.kwargs == {"BLOCK": 64}


def test_heuristics_compute_constexprs_at_launch(tcache):
    calls = []

    @triton.heuristics({"BLOCK": lambda args: calls.append(sorted(args)) or triton.next_power_of_2(args["n"])})
    @triton.jit
    def whole(x, y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0, mask=m)

    x, y = torch.randn(37), torch.zeros(37)
    whole[(1,)](x, y, 37)
    torch.testing.assert_close(y, x * 2)
    assert calls == [["n", "x", "y"]]
    assert [ck for ck in whole.fn.compiled][0][-1] == (int, 64)   # BLOCK=64 was the constexpr compiled

    @triton.autotune(configs=[Config({"SCALE": 2.0}), Config({"SCALE": 3.0})], key=["n"])
    @triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
    @triton.jit
    def scaled(x, y, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=m) * SCALE, mask=m)

    scaled[(1,)](x, y, 37)
    torch.testing.assert_close(y, x * scaled.best_config.kwargs["SCALE"])


@pytest.mark.no_toolchain
def test_config_and_launch_conflicts_are_errors():
    with pytest.raises(KernelArgumentError, match="num_warp'.*Did you mean 'num_warps'"):
        Config({"BLOCK": 16}, num_warp=4)
    k = _tuned(BLOCKS[:2])
    with pytest.raises(KernelArgumentError, match="BLOCK is set both"):
        k[(1,)](torch.zeros(4), torch.zeros(4), 4, BLOCK=16)
    with pytest.raises(KernelArgumentError, match="autotune key name 'm'"):
        triton.autotune(configs=BLOCKS, key=["m"])(triton.jit(_scale_fn))


def test_kernel_accepts_autotuned_and_real_triton_objects():
    k = kernel(_tuned(BLOCKS))   # takes the function under the wrappers
    x, y = torch.randn(20), torch.zeros(20)
    k[(1,)](x, y, 20, BLOCK=32)
    torch.testing.assert_close(y, x * 2)
    assert k.fn is _scale_fn
