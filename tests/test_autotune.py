"""compiler.autotune: tuning, the decision store, run-time lookup through kernels.config_for."""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import kernels
from compiler import get_target
from compiler.autotune import MEASURE_COUNT, AutotuneError, format_summary, tune_ops
from compiler.cache import CacheError
from compiler.cache.decisions import DecisionStore, fingerprint_hash, lookup
from kernels import OP_SPECS, configs
from kernels.norm import rms_norm_kernel
from targets.cpu import CPUTarget

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]
RMS_SHAPE = {"rms_norm": [{"rows": 4, "N": 64}]}


def _store_doc(d, op):
    (f,) = (pathlib.Path(d) / "autotune").glob(f"{op}.cpu.*.fast.json")
    return json.loads(f.read_text())


def test_shape_keys_ignore_batch_and_bucket():
    mm, rms, att = OP_SPECS["matmul"], OP_SPECS["rms_norm"], OP_SPECS["attention"]
    assert mm.shape_key(M=1, N=3990, K=4096) == mm.shape_key(M=999, N=4000, K=4096) == "N=4000,K=4096"
    assert rms.shape_key(N=4096, rows=7) == "N=4096"
    assert att.shape_key(head_dim=128, seq_k=1000, seq_q=1) == "head_dim=128,seq_k=1024"


@pytest.mark.compile
def test_tune_then_wrapper_uses_winner(tcache):
    space = {"rms_norm": [{"BLOCK": 16}, {"BLOCK": 32}]}   # both differ from the default (BLOCK=64 for N=64)
    rows = tune_ops(["rms_norm"], RMS_SHAPE, cache_dir=tcache, budget=30, spaces=space, progress=False)
    assert rows[0]["winner"] in ("BLOCK=16", "BLOCK=32") and rows[0]["measured"] == 2
    tgt = get_target("cpu")
    won = lookup("rms_norm", tgt, "fast", "N=64")
    assert won == kernels.config_for("rms_norm", "cpu", N=64, rows=123)
    with configs.tuned_decisions(False):
        assert kernels.config_for("rms_norm", "cpu", N=64) == {"BLOCK": 64}
    # the wrapper's launch compiles (or reuses) the specialisation with the winner's BLOCK
    rms_norm_kernel.compiled.clear()
    x, w = torch.randn(3, 64), torch.randn(64)
    y = kernels.rms_norm(x, w)
    torch.testing.assert_close(y, kernels.rms_norm_ref(x, w), rtol=1e-5, atol=1e-5)
    (key,) = rms_norm_kernel.compiled
    assert key[-1] == (int, won["BLOCK"])
    assert "summary" in format_summary(rows, "cpu")


@pytest.mark.compile
def test_adding_a_config_keeps_earlier_results(tcache):
    n0 = MEASURE_COUNT["n"]
    tune_ops(["rms_norm"], RMS_SHAPE, cache_dir=tcache, spaces={"rms_norm": [{"BLOCK": 16}, {"BLOCK": 32}]},
         progress=False)
    assert MEASURE_COUNT["n"] - n0 == 2
    before = _store_doc(tcache, "rms_norm")["entries"]["N=64"]["results"]
    rows = tune_ops(["rms_norm"], RMS_SHAPE, cache_dir=tcache, progress=False,
                spaces={"rms_norm": [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]})
    assert MEASURE_COUNT["n"] - n0 == 3 and rows[0]["measured"] == 1 and rows[0]["reused"] == 2
    after = _store_doc(tcache, "rms_norm")["entries"]["N=64"]["results"]
    for k in ("BLOCK=16", "BLOCK=32"):
        assert after[k] == before[k]
    assert after["BLOCK=64"]["status"] == "ok"


@pytest.mark.compile
def test_wrong_and_oversized_candidates_are_rejected(tcache, monkeypatch, capsys):
    monkeypatch.setattr(kernels.norm, "rms_norm_ref", lambda x, w=None, eps=1e-6, out_dtype=None: x.double() * 2)
    rows = tune_ops(["rms_norm"], RMS_SHAPE, cache_dir=tcache, spaces={"rms_norm": [{"BLOCK": 32}]}, verbose=True)
    monkeypatch.undo()
    res = _store_doc(tcache, "rms_norm")["entries"]["N=64"]
    assert res["results"]["BLOCK=32"]["status"] == "rejected" and res["winner"] is None and rows[0]["winner"] is None
    assert "does not match the reference" in res["results"]["BLOCK=32"]["reason"]
    assert "rejected rms_norm N=64 BLOCK=32: does not match the reference" in capsys.readouterr().err
    big = {"BLOCK_M": 16384, "BLOCK_N": 64, "BLOCK_K": 32}    # 4 MiB of fp32 accumulator alone
    ok = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}
    # M as large as the tile: on cpu BLOCK_M follows M (it is bit-neutral there), so only a problem
    # with that many rows launches the oversized tile
    tune_ops(["matmul"], {"matmul": [{"M": 16384, "N": 64, "K": 32}]}, cache_dir=tcache, spaces={"matmul": [big, ok]},
         progress=False)
    ent = _store_doc(tcache, "matmul")["entries"]["N=64,K=32"]
    assert ent["results"]["BLOCK_K=32,BLOCK_M=16384,BLOCK_N=64"]["status"] == "rejected"
    assert "KiB" in ent["results"]["BLOCK_K=32,BLOCK_M=16384,BLOCK_N=64"]["reason"]
    assert ent["winner"] == "BLOCK_K=32,BLOCK_M=16,BLOCK_N=64"


@pytest.mark.integration
def test_two_processes_leave_a_valid_store(tmp_path):
    cache = tmp_path / "cache"
    procs = []
    for n in (64, 128):
        f = tmp_path / f"shapes{n}.json"
        f.write_text(json.dumps({"shapes": {"rms_norm": [{"rows": 2, "N": n}]}}))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("TILEJIT_CACHE_STRICT", None)
        procs.append(subprocess.Popen([sys.executable, "-m", "compiler.autotune", "--target", "cpu", "--kernels",
                                       "rms_norm", "--shapes", str(f), "--cache-dir", str(cache), "--repeat", "1"],
                                      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "autotune summary" in out
    doc = _store_doc(cache, "rms_norm")
    assert set(doc["entries"]) == {"N=64", "N=128"}
    assert all(e["winner"] for e in doc["entries"].values())
    assert not list((cache / "autotune").glob("*.tmp"))


def test_strict_cache_miss_names_op_and_shape_key(tcache, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_STRICT", "1")
    with pytest.raises(CacheError, match=r"'rms_norm', shape key N=77"):
        kernels.config_for("rms_norm", "cpu", N=77)
    with pytest.raises(CacheError, match=r"'attention', shape key head_dim=64,seq_k=128"):
        kernels.config_for("attention", "cpu", head_dim=64, seq_k=100, seq_q=1)


def test_target_without_run_or_cost_model_refuses(tcache):
    with pytest.raises(AutotuneError, match="no cost model"):
        tune_ops(["rms_norm"], RMS_SHAPE, target=get_target("gpu:sm_90"), cache_dir=tcache, progress=False)


@pytest.mark.integration
def test_command_line_prebuilds_a_gpu_cache_without_a_gpu(tmp_path):
    """`--target gpu --arch sm_90` on a machine without a GPU: nothing to measure or estimate, so the
    default configs are compiled into the cache (compile_only) and the entries are real sm_90 builds;
    a second run finds them all (no Triton compile)."""
    d = tmp_path / "gcache"
    cmd = [sys.executable, "-m", "compiler.autotune", "--target", "gpu", "--arch", "sm_90", "--kernels",
           "rms_norm", "--quick", "--cache-dir", str(d)]
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(d)}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "pre-built for gpu:sm_90" in first.stdout and "rms_norm" in first.stdout
    metas = [json.loads(p.read_text()) for p in d.rglob("metadata.json")]
    assert metas and all(m["target"] == {"arch": 90, "backend": "cuda", "warp_size": 32} for m in metas)
    assert all((p.parent / "kernel.cubin").stat().st_size > 1000 for p in d.rglob("metadata.json"))
    row = [ln for ln in first.stdout.splitlines() if ln.startswith("rms_norm")][0]
    assert row.split()[-2] == "1"   # one kernel compiled
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert again.returncode == 0, again.stderr
    row2 = [ln for ln in again.stdout.splitlines() if ln.startswith("rms_norm")][0]
    assert row2.split()[-2] == "0" and row2.split()[-3] == row.split()[-3]   # found: same key, no build


def test_cost_model_decisions_are_labelled_estimated(tcache):
    cpu = get_target("cpu")

    class Modelled(CPUTarget):
        """The cpu target with a cost model instead of measurable timings."""
        name = "modelled"
        caps = dataclasses.replace(cpu.caps, measurable=False)

        def fingerprint(self):
            return {"target": "modelled"}

        def estimate(self, spec, config, shape, policy):
            return 1.0 / config["BLOCK"]

    tgt = Modelled()
    rows = tune_ops(["rms_norm"], {"rms_norm": [{"rows": 4, "N": 256}]}, target=tgt, cache_dir=tcache, progress=False)
    assert rows[0]["estimated"] and rows[0]["winner"] == "BLOCK=256" and rows[0]["measured"] == 0
    assert "estimated" in format_summary(rows, "modelled")
    doc = DecisionStore(tcache).read("rms_norm", "modelled", fingerprint_hash(tgt), "fast")
    assert all(r["estimated"] for r in doc["entries"]["N=256"]["results"].values() if r["status"] == "ok")


@pytest.mark.integration
def test_tune_export_import_then_strict_cache_runs_with_zero_compiles(tcache, tmp_path):
    """The shipping flow: tune, export, import into an empty cache, then the library kernel runs in
    a new process with TILEJIT_CACHE_STRICT=1: its tuned decision and its binary are both there."""
    from compiler.cache import KernelCache
    from compiler.cache.archive import export_cache, import_cache

    space = {"rms_norm": [{"BLOCK": 16}, {"BLOCK": 32}]}
    rms_norm_kernel.compiled.clear()   # earlier tests compiled into other cache dirs: start cold
    tune_ops(["rms_norm"], RMS_SHAPE, cache_dir=tcache, budget=30, spaces=space, progress=False)
    kernels.rms_norm(torch.randn(4, 64), torch.randn(64))   # the winner, now served from this cache
    archive = tmp_path / "shipped.tar.gz"
    manifest = export_cache(KernelCache(tcache), archive)
    assert manifest["decisions"], "the autotuner's decisions must travel with the binaries"
    fresh = tmp_path / "deployed"
    res = import_cache(KernelCache(fresh), archive)
    assert res["decisions_imported"] and all(name.startswith("autotune/") for name in res["decisions_imported"])
    assert not any(name.startswith("autotune/") for name in res["imported"])   # entries and decisions apart
    script = (
        "import json, torch, kernels\n"
        "from compiler.cache import STATS\n"
        "x, w = torch.randn(4, 64), torch.randn(64)\n"
        "y = kernels.rms_norm(x, w)\n"
        "torch.testing.assert_close(y, kernels.rms_norm_ref(x, w), rtol=1e-5, atol=1e-5)\n"
        "print(json.dumps(STATS.as_dict()))\n")
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(fresh), "TILEJIT_CACHE_STRICT": "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["builds"] == 0 and stats["disk_hits"] >= 1


def test_kunlun_tunes_offline_with_every_decision_estimated(tcache):
    """--target kunlun on a machine without the chip: ranked by the target's cost model, nothing
    measured, every decision labelled estimated; every candidate fits LM (the memory plan strip-mines
    the big matmul tiles), so none is rejected."""
    before = MEASURE_COUNT["n"]
    rows = tune_ops(["matmul", "rms_norm"], None, target="kunlun:xpu2", cache_dir=tcache, progress=False, quick=False)
    assert MEASURE_COUNT["n"] == before
    won = [r for r in rows if r["winner"]]
    assert won and all(r["estimated"] for r in won)
    assert all(r["rejected"] == 0 and r["winner"] for r in rows if r["op"] == "matmul")
    doc = json.loads(next((pathlib.Path(tcache) / "autotune").glob("matmul.*.json")).read_text())
    results = [r for e in doc["entries"].values() for r in e["results"].values()]
    assert results and all(r["estimated"] for r in results)
    assert all(e["estimated"] for e in doc["entries"].values())


def test_a_timing_takes_more_samples_while_it_is_spread_and_says_when_it_never_settles():
    import time as _time

    from compiler.autotune import measure_call
    from compiler.autotune.tuner import MAX_SAMPLES, SPREAD_GOAL
    steady = measure_call(lambda: sum(range(2000)), 3)
    assert steady.samples >= 3 and steady.seconds > 0
    assert steady.settled == (steady.spread <= SPREAD_GOAL)
    calls = {"n": 0}

    def erratic():   # every other 5 ms sample is ~3x slower: never within 5%
        calls["n"] += 1
        _time.sleep(0.006 if (calls["n"] // 2) % 2 else 0.002)
    t = measure_call(erratic, 3)
    assert t.samples == MAX_SAMPLES and not t.settled and t.spread > SPREAD_GOAL


@pytest.mark.compile
def test_each_measured_result_keeps_its_spread_and_the_summary_warns_when_unsettled(tcache):
    for _attempt in range(3):   # a busy spell makes the pair untrusted and unstored: measured again
        rows = tune_ops(["rms_norm"], RMS_SHAPE, cache_dir=tcache, spaces={"rms_norm": [{"BLOCK": 64}, {"BLOCK": 16}]},
                        progress=False, force=True)   # BLOCK=64 is the default for N=64: the reference
        results = _store_doc(tcache, "rms_norm")["entries"]["N=64"]["results"]
        if "BLOCK=16" in results:
            break
        assert rows[0]["untrusted_configs"] == 1, rows[0]   # not stored only when reported untrusted
    res = results["BLOCK=16"]
    assert res["samples"] >= 4 and res["spread"] >= 0 and res["best_s"] <= res["time_s"]
    # paired with the default: the ratio of the fastest samples, how far the halves disagree, the median
    # (not kept where other work held the cores: it would measure that work)
    assert res["ref"] == "BLOCK=64" and res["ratio"] > 0 and res["ratio_spread"] >= 0
    assert ("ratio_median" not in res) if rows[0]["busy"] else res["ratio_median"] > 0
    assert results["BLOCK=64"]["ratio"] == 1.0
    assert rows[0]["spread"] == results[rows[0]["winner"]]["spread"]
    text = format_summary([{**rows[0], "unsettled": 2}], "cpu")
    assert "not settled: 2 ratio(s)" in text and "rms_norm N=64" in text and "--force" in text
    assert "not settled" not in format_summary([{**rows[0], "unsettled": 0}], "cpu")


def test_a_candidate_displaces_the_default_only_when_faster_beyond_the_noise(tmp_path):
    from compiler.cache.decisions import MIN_GAIN, config_key, result
    store = DecisionStore(tmp_path)

    def winner(default_t, default_spread, other_t, other_spread, estimated=False, baseline="BLOCK=64"):
        res = {"BLOCK=64": result({"BLOCK": 64}, "ok", time_s=default_t, spread=default_spread, estimated=estimated),
               "BLOCK=16": result({"BLOCK": 16}, "ok", time_s=other_t, spread=other_spread, estimated=estimated)}
        key = config_key({"t": default_t, "o": other_t, "s": other_spread, "e": estimated, "b": baseline})
        return store.record("rms_norm", "cpu", "f" * 64, "fast", key, {"N": 64}, res, set(res), baseline)["winner"]

    # timings from a loaded machine: 2% apart with spreads near 100% keep the default
    assert winner(4.62e-3, 0.99, 4.59e-3, 0.98) == "BLOCK=64"
    # settled timings: a gain under MIN_GAIN is noise, a larger one wins
    assert winner(1.0, 0.01, 1.0 / (1 + MIN_GAIN / 2), 0.01) == "BLOCK=64"
    assert winner(1.0, 0.01, 0.8, 0.01) == "BLOCK=16"
    # the gain has to clear the wider of the two spreads
    assert winner(1.0, 0.3, 0.8, 0.01) == "BLOCK=64" and winner(1.0, 0.01, 0.8, 0.3) == "BLOCK=64"
    # cost-model estimates are not noisy, and without a baseline the fastest wins (Triton's autotune)
    assert winner(1.0, None, 0.99, None, estimated=True) == "BLOCK=16"
    assert winner(4.62e-3, 0.99, 4.59e-3, 0.98, baseline=None) == "BLOCK=16"


def test_a_decision_store_that_cannot_be_written_says_so_and_keeps_what_it_had(tmp_path, monkeypatch):
    """A full disk or a read-only cache under a tune: a CacheError naming the op, the directory and
    the fix (the CLI prints it and exits 2), not a bare OSError; the stored document is intact."""
    from compiler.cache import decisions
    store = DecisionStore(tmp_path)
    res = {"BLOCK=64": decisions.result({"BLOCK": 64}, "ok", time_s=1.0, spread=0.01)}
    store.record("rms_norm", "cpu", "f" * 64, "fast", "N=64", {"N": 64}, res, set(res), "BLOCK=64")
    before = store.path("rms_norm", "cpu", "f" * 64, "fast").read_bytes()

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(decisions.tempfile, "mkstemp", full_disk)
    with pytest.raises(CacheError, match=r"cannot store the autotune decisions of op 'rms_norm' in .*No space left "
                                         r"on device.*TILEJIT_CACHE_DIR"):
        store.record("rms_norm", "cpu", "f" * 64, "fast", "N=128", {"N": 128}, res, set(res), "BLOCK=64")
    assert store.path("rms_norm", "cpu", "f" * 64, "fast").read_bytes() == before
