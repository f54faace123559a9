"""compiler/autotune/timing.py on a clock the test drives: paired samples decide by their fastest
samples whatever load is added to some of them, a parallel run that waits for busy cores is
caught against one thread and compared on one thread instead, and the decision store displaces a
default only for a gain both statistics agree on. No timing of this machine is asserted."""
from __future__ import annotations

import pytest
import torch

from compiler.autotune import timing
from compiler.cache.decisions import DecisionStore, result

pytestmark = pytest.mark.no_toolchain


class Clock:
    """perf_counter for timing.py: advances only when a fake call says it took time."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr(timing.time, "perf_counter", lambda: self.now)
        monkeypatch.setattr(timing.time, "sleep", lambda s: None)

    def call(self, cost, load=lambda n, now: 0.0):
        """A function whose n-th call, started at `now`, takes `cost` seconds plus `load(n, now)`."""
        n = [0]

        def fn():
            n[0] += 1
            self.now += cost + load(n[0], self.now)
        return fn


def test_the_fastest_samples_decide_whatever_load_hits_some(monkeypatch):
    clock = Clock(monkeypatch)
    # another process holds the core for 8 ms of every 20: a call started then takes 3x as long
    busy_a = lambda n, now: 2 * 10e-6 if (now % 20e-3) <= 8e-3 else 0.0   # noqa: E731
    busy_b = lambda n, now: 2 * 20e-6 if (now % 20e-3) <= 8e-3 else 0.0   # noqa: E731
    a, b = clock.call(10e-6, busy_a), clock.call(20e-6, busy_b)
    p = timing.measure_pair(a, b, 3)
    assert p.ratio_best == pytest.approx(0.5) and p.settled
    assert p.a.best == pytest.approx(10e-6, rel=0.05) and p.a.samples >= 4   # at least 4 pairs: two halves
    assert p.a.seconds > p.a.best   # the median carries the load, the fastest sample does not


def test_a_parallel_run_that_waits_for_cores_is_compared_on_one_thread(monkeypatch):
    clock = Clock(monkeypatch)

    def kernel(cost):   # on several threads every call waits a scheduler slice; on one it does not
        def fn():
            clock.now += cost + (8e-3 if torch.get_num_threads() > 1 else 0.0)
        return fn
    a, b = kernel(5e-6), kernel(10e-6)
    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("one thread here: nothing waits for another core")
    c = timing.checked(lambda: timing.measure_pair(a, b, 3), (a, b))
    assert c.one_thread and c.why is None
    assert c.m.ratio_best == pytest.approx(0.5) and c.m.a.best == pytest.approx(5e-6)
    assert torch.get_num_threads() == threads   # restored
    # the same measurement alone would have been believed as 1.00x, 8 ms a call
    p = timing.measure_pair(a, b, 3)
    assert p.ratio_best == pytest.approx(1.0, abs=1e-3) and "waited for busy cores" in timing.implausible(
        p.a, timing.single_thread_best(a))


def test_a_timing_whose_median_is_far_above_its_fastest_is_not_believed(monkeypatch):
    clock = Clock(monkeypatch)
    t = timing.measure_call(clock.call(1e-3, lambda n, now: 0.0 if n < 8 else 5e-3), 5)
    assert t.best == pytest.approx(1e-3) and "median sample" in timing.implausible(t, None)
    assert timing.implausible(timing.measure_call(clock.call(1e-3), 3), 1e-3) is None


def test_a_default_is_displaced_only_by_a_gain_both_statistics_show(tmp_path):
    store = DecisionStore(tmp_path)

    def winner(ratio, spread, median):
        res = {"BLOCK=64": result({"BLOCK": 64}, "ok", time_s=1.0, ratio=1.0, ratio_spread=0.0, ref="BLOCK=64"),
               "BLOCK=16": result({"BLOCK": 16}, "ok", time_s=ratio, ratio=ratio, ratio_spread=spread,
                                  ratio_median=median, ref="BLOCK=64")}
        key = f"r{ratio}s{spread}m{median}"
        return store.record("rms_norm", "cpu", "f" * 64, "fast", key, {"N": 64}, res, set(res), "BLOCK=64")["winner"]

    assert winner(0.8, 0.01, 0.82) == "BLOCK=16"
    assert winner(0.97, 0.01, 0.97) == "BLOCK=64"     # under MIN_GAIN
    assert winner(0.8, 0.3, 0.8) == "BLOCK=64"        # the halves disagree by more than the gain
    assert winner(0.8, 0.01, 1.02) == "BLOCK=64"      # the median says otherwise


def test_a_row_far_from_its_neighbours_is_timed_again_and_marked_when_it_stays(monkeypatch):
    """rms_norm on 4 rows "took" 8 ms where 4096 rows took 0.1 ms: the small row is timed again;
    whether it then passes is up to that timing (here a fake one), and only then is it believed."""
    from compiler import get_target
    from compiler.autotune import library
    from kernels import OP_SPECS

    spec = OP_SPECS["rms_norm"]
    small, big = {"rows": 4, "N": 4096}, {"rows": 4096, "N": 4096}

    def row(shape, best):
        return dict(op="rms_norm", shape=spec.describe(shape), winner="BLOCK=1024", winner_config={"BLOCK": 1024},
                    best_s=best, time_s=best, untrusted=None, one_thread=False)
    retimed = []

    def again(seconds):
        def fake(fn, repeat):
            retimed.append(repeat)
            return timing.Checked(timing.Timing(seconds, 0.0, 3, seconds))
        return fake
    ctx = {"policy": "fast", "repeat": 3}
    for seconds, believed in ((2e-5, True), (8e-3, False)):
        retimed.clear()
        monkeypatch.setattr(library, "_checked_here", again(seconds))
        rows = [row(small, 8e-3), row(big, 1e-4)]
        library._recheck_outliers(rows, [(spec, small), (spec, big)], get_target("cpu"), ctx)
        assert retimed == [3]                            # the small row, once; the big one is plausible
        assert (rows[0]["untrusted"] is None) == believed, rows[0]
        assert rows[0]["best_s"] == (seconds if believed else 8e-3) and rows[1]["best_s"] == 1e-4
    assert "where [4096, 4096] (as much work or more) took 0.1 ms" in rows[0]["untrusted"]


def test_a_gain_that_does_not_show_again_is_not_stored(tmp_path, monkeypatch):
    """While the default's samples are slowed (other work), a candidate of the same speed looks 2x
    faster; when that load is gone before the confirming pairs, the gain does not show again: the
    candidate is not stored and the default stays the decision."""
    from compiler.autotune import tuner
    from compiler.autotune.tuner import DecisionKey, tune

    clock = Clock(monkeypatch)
    busy = {"on": True}

    def run(cfg):   # both configs cost 10 us; the default's calls take twice that while busy
        clock.now += 10e-6 * (2 if cfg["B"] == 1 and busy["on"] else 1)
        return cfg["B"]
    real = tuner.winner_of

    def load_gone(*args, **kw):   # the confirmation starts: the other work has finished
        busy["on"] = False
        return real(*args, **kw)
    monkeypatch.setattr(tuner, "winner_of", load_gone)
    key = DecisionKey("demo", "cpu", "f" * 16, "fast", "N=1", {"N": 1})
    out = tune([{"B": 1}, {"B": 2}], run, lambda o: None, key, store=DecisionStore(tmp_path), baseline="B=1")
    assert out.entry["winner"] == "B=1" and "B=2" not in out.entry["results"]
    (ck, why), = out.untrusted_now
    assert ck == "B=2" and "did not show again: 2.00x, then 1.00x" in why

    busy["on"] = True   # a gain that is real shows again and is stored
    monkeypatch.setattr(tuner, "winner_of", real)
    out = tune([{"B": 1}, {"B": 2}], run, lambda o: None, key, store=DecisionStore(tmp_path / "2"), baseline="B=1")
    assert out.entry["winner"] == "B=2" and not out.untrusted_now


def test_others_busy_counts_the_cores_other_work_used_while_it_slept(monkeypatch):
    ticks = iter([(100.0, 1000.0), (250.0, 1200.0)])   # 150 of 200 jiffies busy: 3/4 of the cores
    monkeypatch.setattr(timing, "_cpu_times", lambda: next(ticks))
    monkeypatch.setattr(timing.time, "sleep", lambda s: None)
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 2)
    assert timing.others_busy() == pytest.approx(1.5)
    monkeypatch.setattr(timing, "_cpu_times", lambda: None)   # no /proc/stat: nothing known to wait for
    assert timing.others_busy() == 0.0


@pytest.mark.parametrize("others", [0.0, 1.5])
def test_candidates_are_ranked_on_one_thread_and_the_winner_checked_on_every_thread(tmp_path, monkeypatch, others):
    """The default and every candidate are timed on one thread. A winner there that is slower
    than the default on every thread (here 3x its one-thread time, the default unchanged) is not
    stored; where other work holds the cores (others_busy at 1.5 cores), that check is skipped and
    the one-thread winner stands. The thread count is restored either way."""
    from compiler.autotune import tuner
    from compiler.autotune.tuner import DecisionKey, tune

    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("one thread here: nothing to rank on fewer")
    clock = Clock(monkeypatch)
    seen: dict[int, set] = {1: set(), 2: set()}

    def run(cfg):
        n = torch.get_num_threads()
        seen[cfg["B"]].add(n)
        clock.now += 20e-6 if cfg["B"] == 2 else 10e-6 * (3 if n > 1 else 1)
        return cfg["B"]
    monkeypatch.setattr(tuner, "others_busy", lambda: others)
    key = DecisionKey("demo", "cpu", "f" * 16, "fast", "N=1", {"N": 1})
    out = tune([{"B": 2}, {"B": 1}], run, lambda o: None, key, store=DecisionStore(tmp_path), baseline="B=2")
    busy = others >= timing.BUSY_CORES
    assert out.busy == busy and torch.get_num_threads() == threads
    if busy:
        assert seen == {1: {1}, 2: {1}} and out.entry["winner"] == "B=1"
    else:
        assert seen[1] == {1, threads} and out.entry["winner"] == "B=2" and "B=1" not in out.entry["results"]
        (ck, why), = out.untrusted_now
        assert ck == "B=1" and f"1.50x its time on {threads} threads" in why
