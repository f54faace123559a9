"""The autotuner's use of time: candidates compiled in parallel (and the per-specialisation compile
lock that allows it), the budget shared among shapes with the default always measured, and rows
that reuse a decision timed on their own shape."""
import threading

import pytest

import torch

import compiler
from compiler import kernel, language as tl
from compiler.autotune import tune_ops
from compiler.autotune.tuner import DecisionKey, tune
from compiler.cache.decisions import DecisionStore
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


def test_a_row_that_reuses_a_decision_is_timed_on_its_own_shape(tcache):
    spec = OP_SPECS["rms_norm"]
    shapes = {"rms_norm": [{"rows": 2, "N": 64}, {"rows": 32768, "N": 64}]}   # one key: N=64
    rows = tune_ops(["rms_norm"], shapes, cache_dir=tcache, budget=60, spaces=RMS_SPACE, progress=False)
    first, second = rows
    assert first["shape_key"] == second["shape_key"] == spec.shape_key(N=64)
    assert first["kind"] == "measured" and second["kind"] == "reused" and second["winner"] == first["winner"]
    # 16384x the rows: a time taken on the second shape, not the first one's stored time
    assert second["time_s"] > 5 * first["time_s"]
    assert second["default_time_s"] > 5 * first["time_s"]


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
