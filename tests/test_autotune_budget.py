"""The autotuner's use of time: candidates compiled in parallel (and the per-specialisation compile
lock that allows it), the budget shared among shapes with the default always measured, and rows
that reuse a decision timed on their own shape."""
import collections
import dataclasses
import threading

import pytest

import torch

import compiler
from compiler import kernel, language as tl
from compiler import get_target
from compiler.autotune import library, tune_ops
from compiler.autotune.timing import METHOD
from compiler.autotune.tuner import DecisionKey, tune
from compiler.cache.decisions import DecisionStore, config_key, fingerprint_hash, result
from kernels import OP_SPECS
from targets.cpu import CPUTarget

pytestmark = pytest.mark.compile

RMS_SPACE = {"rms_norm": [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]}


@kernel
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)


class _MeetingTarget(CPUTarget):
    """A real cpu target whose builds wait until two of them are in progress at once: it proves
    that two specialisations of one kernel compile concurrently (serialised builds would leave
    the first waiting alone until the barrier times out)."""

    def __init__(self):
        super().__init__()
        self.meeting = threading.Barrier(2, timeout=60)

    def build(self, fn, source, out_dir):
        self.meeting.wait()
        return super().build(fn, source, out_dir)


def test_two_specialisations_of_one_kernel_compile_at_the_same_time(tcache):
    tgt = _MeetingTarget()
    x = torch.arange(40, dtype=torch.float32)
    outs, errors = {}, []

    def launch(block):
        try:
            y = torch.zeros_like(x)
            with compiler.use_target(tgt):
                _scale[((40 + block - 1) // block,)](x, y, 40, BLOCK=block)
            outs[block] = y
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=launch, args=(b,)) for b in (16, 32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for y in outs.values():
        torch.testing.assert_close(y, x * 3.0)
    assert len(outs) == 2


def test_one_specialisation_launched_from_two_threads_compiles_once(tcache):
    x = torch.arange(40, dtype=torch.float32)
    ys = [torch.zeros_like(x) for _ in range(4)]
    _scale.compiled.clear()
    threads = [threading.Thread(target=lambda y=y: _scale[(3,)](x, y, 40, BLOCK=16)) for y in ys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(_scale.compiled) == 1
    for y in ys:
        torch.testing.assert_close(y, x * 3.0)


def test_a_spent_budget_still_measures_each_shapes_default_first(tcache):
    shapes = {"rms_norm": [{"rows": 4, "N": 64}, {"rows": 4, "N": 32}]}   # defaults BLOCK=64, BLOCK=32
    rows = tune_ops(["rms_norm"], shapes, cache_dir=tcache, budget=1e-9, spaces=RMS_SPACE, progress=False)
    for r in rows:
        assert r["winner"] == r["default"], r       # the only candidate measured is the default
        assert r["measured"] == 1 and r["skipped"] + r["pruned"] == 2 and r["skipped"] >= 1
        assert r["kind"] == "measured"


def test_a_large_space_does_not_spend_the_budget_of_the_shapes_after_it(tcache):
    """Each shape's deadline is its share of what is left, by its number of candidates: the
    first shape, with a budget of a few seconds, cannot leave the second with nothing."""
    shapes = {"rms_norm": [{"rows": 4, "N": 64}], "layer_norm": [{"rows": 4, "N": 64}]}
    spaces = {"rms_norm": [{"BLOCK": b} for b in (16, 32, 64, 128, 256, 512)],
              "layer_norm": [{"BLOCK": b} for b in (16, 32, 64, 128, 256, 512)]}
    rows = tune_ops(["rms_norm", "layer_norm"], shapes, cache_dir=tcache, budget=4.0, spaces=spaces, progress=False)
    assert [r["op"] for r in rows] == ["rms_norm", "layer_norm"]
    assert all(r["winner"] for r in rows)
    assert rows[1]["measured"] >= 1


def test_a_row_that_reuses_a_decision_is_timed_on_its_own_shape(tcache, monkeypatch):
    """A stored decision for N=64 (as an earlier run on [2, 64] left it: BLOCK=32 beat the default)
    is reused for [32768, 64], and the row's figures come from calls on that shape: its winner and
    the default ran there, nothing was measured again (counted by the rows each call ran on, not
    by how long it took)."""
    spec = OP_SPECS["rms_norm"]
    tgt = get_target("cpu")
    earlier = {ck: result(cfg, "ok", time_s=t, best_s=t, spread=0.01, samples=5, ratio=t / 2e-6, ratio_spread=0.01,
                          ratio_median=t / 2e-6, ref="BLOCK=64", method=METHOD)
               for ck, cfg, t in (("BLOCK=64", {"BLOCK": 64}, 2e-6), ("BLOCK=32", {"BLOCK": 32}, 1e-6),
                                  ("BLOCK=16", {"BLOCK": 16}, 3e-6))}
    DecisionStore(tcache).record("rms_norm", tgt.name, fingerprint_hash(tgt), "fast", "N=64", {"N": 64}, earlier,
                                 baseline="BLOCK=64")
    calls = collections.Counter()   # (rows of the problem, config key) of every call the tuner made

    def counted_problem(shape):
        prob = spec.problem(shape)

        def run(cfg):
            calls[shape["rows"], config_key(cfg)] += 1
            return prob.run(cfg)
        return dataclasses.replace(prob, run=run)
    counted = dataclasses.replace(spec, problem=counted_problem)
    monkeypatch.setattr(library, "library_ops", lambda: {**OP_SPECS, "rms_norm": counted})
    (row,) = tune_ops(["rms_norm"], {"rms_norm": [{"rows": 32768, "N": 64}]}, cache_dir=tcache, budget=60,
                      spaces=RMS_SPACE, progress=False)
    assert row["kind"] == "reused" and row["winner"] == "BLOCK=32" and row["reused"] == 3 and row["measured"] == 0
    # the winner and the default ran on this shape, in pairs (4 at least), and nothing else did
    assert {ck for (rows, ck) in calls} == {"BLOCK=32", "BLOCK=64"} and {rows for rows, _ in calls} == {32768}
    assert all(n >= 4 for n in calls.values()), calls
    assert row["time_s"] is not None and row["vs_default"] is not None


@pytest.mark.no_toolchain
def test_candidates_are_built_ahead_in_batches_of_the_workers(tmp_path):
    """With `build` and two workers, each batch of two candidates is built (in parallel) before
    either is measured, and the decision is the one a serial run makes."""
    events = []
    key = DecisionKey("demo", "cpu", "f" * 16, "fast", "N=1", {"N": 1})

    def build(cfg):
        events.append(("build", cfg["B"]))

    def run(cfg):
        events.append(("run", cfg["B"]))
        return cfg["B"]

    space = [{"B": b} for b in (1, 2, 3)]
    tuned = tune(space, run, lambda out: None, key, store=DecisionStore(tmp_path), build=build, workers=2,
                 repeat=1)
    assert tuned.measured == 3 and tuned.entry["winner"]
    first_run = events.index(("run", 1))
    assert sorted(events[:first_run]) == [("build", 1), ("build", 2)]
    assert ("build", 3) not in events      # a batch of one is not built ahead: the run builds it
