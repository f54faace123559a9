"""Timings that a busy machine cannot fake, for the autotuner and the benchmarks.

On a machine shared with other work, a parallel launch waits for its slowest thread, and a thread
that waits for a core waits a scheduler slice (milliseconds): a 20 us kernel then "takes" 8 ms,
every sample alike, so a small spread proves nothing. Four defences:

- paired samples (`measure_pair`): a candidate and its baseline (the default config, or torch)
  are sampled in turn, in alternating order, so load that comes and goes meets both; they are
  compared by the ratio of their fastest samples (other work only adds time), taken until the
  odd and the even pairs agree on it, with the median of the per-pair ratios beside it;
- each timing is checked against a run on one thread (`single_thread_best`; torch and the cpu
  target's kernels share one OpenMP runtime): a parallel run that is much slower than one thread,
  or whose median is far above its fastest sample, is re-measured (`checked`); parallel runs that
  keep waiting for busy cores are measured on one thread instead (both sides of a comparison
  alike), and what stays implausible is reported untrusted rather than believed;
- the tuner ranks candidates on one thread (compiler/autotune/tuner.py): each side then gets the
  same share of a core whatever else runs, where parallel runs each wait their own scheduler
  slices and thread wake-ups; `others_busy` says whether the winner can also be checked on every
  thread.

A sample is a batch of back-to-back calls of at least MIN_SAMPLE_S, so timer resolution and one
late call do not decide it; more samples are taken (up to MAX_SAMPLES) while they spread by more
than SPREAD_GOAL.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import time

SPREAD_GOAL = 0.05   # a timing has settled when its samples' spread is within 5% of their median
MAX_SAMPLES = 15
MIN_SAMPLE_S = 0.002   # short: fewer samples span another process's time slice
RETRIES = 1          # re-measurements of an implausible timing before it is taken on one thread
# implausible: a parallel run this many times slower than one thread, by at least SLOW_BY seconds
# (so a 2 us kernel whose OpenMP fork costs 3 us is not suspected), or a median this many times
# its fastest sample
PARALLEL_FACTOR, SLOW_BY, ERRATIC_FACTOR = 2.0, 50e-6, 3.0
LONG_S = 0.5         # calls this long are not compared with one thread (checked): at a load of 8 on 2
                     # cores, a 70 ms torch op of three parallel regions still waited slices in each
UNSETTLED = 0.25     # a pair whose halves still disagree by more than this is not believed (a smaller
                     # disagreement is kept: it widens the margin a candidate must win by)
METHOD = 3           # stored with each measured result: results timed before it (3: ranked on one thread) are
                     # measured again
BUSY_CORES = 0.5     # other work using this many cores: a tuner skips its all-thread check (others_busy)
BUSY_WINDOW_S = 0.1  # how long others_busy watches the cores


@dataclasses.dataclass(frozen=True)
class Timing:
    seconds: float   # the median sample, per call
    spread: float    # (q3 - q1) / median of the samples ((max - min) / median under 4 samples)
    samples: int
    best: float = 0.0   # the fastest sample, per call

    @property
    def settled(self) -> bool:
        return self.spread <= SPREAD_GOAL


@dataclasses.dataclass(frozen=True)
class Paired:
    """`a` and `b` sampled in turn. `ratio_best` = t_a / t_b of the fastest samples, what decides
    (other work only ever adds time, so the fastest sample is the closest to the call's own cost);
    `best_spread` = how far the same ratio of the odd and of the even pairs disagree (their
    difference over it); `ratio` / `ratio_spread` = the median of the per-pair ratios and their
    spread, reported beside it (< 1: a is faster)."""

    a: Timing
    b: Timing
    ratio: float
    ratio_spread: float
    ratio_best: float
    best_spread: float

    @property
    def settled(self) -> bool:
        return self.best_spread <= SPREAD_GOAL


def far_apart(a: float, b: float, factor: float = 2.0) -> bool:
    """Whether two estimates of one ratio (the fastest samples', the median pair's) differ by more
    than `factor` either way: the median then measured other work, not the kernels."""
    return max(a, b) > factor * min(a, b)


def spread(samples: list[float]) -> float:
    """(q3 - q1) / median of the samples ((max - min) / median under 4 samples; 0 for one)."""
    if len(samples) < 2:
        return 0.0
    mid = statistics.median(samples)
    if len(samples) < 4:
        return (max(samples) - min(samples)) / mid
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / mid


def _calls(fn) -> int:
    """Back-to-back calls that make a sample last >= MIN_SAMPLE_S (from the fastest of 3 calls)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return max(1, math.ceil(MIN_SAMPLE_S / max(best, 1e-7)))


def _sample(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def _timing(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), spread(samples), len(samples), min(samples))


def measure_call(fn, repeat: int) -> Timing:
    """Seconds per call of `fn()`: at least `repeat` samples, more (up to MAX_SAMPLES) while their
    spread is over SPREAD_GOAL. A timing that never settles says so (`settled`)."""
    calls = _calls(fn)
    samples: list[float] = []
    while len(samples) < repeat or (spread(samples) > SPREAD_GOAL and len(samples) < max(repeat, MAX_SAMPLES)):
        samples.append(_sample(fn, calls))
    return _timing(samples)


def _best_ratio(sa: list[float], sb: list[float]) -> float:
    return min(sa) / min(sb)


def _halves_disagree(sa: list[float], sb: list[float]) -> float:
    """|best ratio of the even pairs - of the odd pairs| / the best ratio of all (inf under 4 pairs)."""
    if len(sa) < 4:
        return float("inf")
    even, odd = _best_ratio(sa[0::2], sb[0::2]), _best_ratio(sa[1::2], sb[1::2])
    return abs(even - odd) / _best_ratio(sa, sb)


def measure_pair(fn_a, fn_b, repeat: int) -> Paired:
    """`fn_a` and `fn_b` sampled in turn (a b, b a, a b, ...: neither always goes first): at least
    `repeat` pairs and 4, more (up to MAX_SAMPLES) until the odd and the even pairs agree on the
    ratio of the fastest samples within SPREAD_GOAL."""
    ca, cb = _calls(fn_a), _calls(fn_b)
    sa: list[float] = []
    sb: list[float] = []
    while len(sa) < max(repeat, 4) or (_halves_disagree(sa, sb) > SPREAD_GOAL and len(sa) < max(repeat, MAX_SAMPLES)):
        if len(sa) % 2:
            b = _sample(fn_b, cb)
            a = _sample(fn_a, ca)
        else:
            a = _sample(fn_a, ca)
            b = _sample(fn_b, cb)
        sa.append(a)
        sb.append(b)
    ratios = [a / b for a, b in zip(sa, sb)]
    return Paired(_timing(sa), _timing(sb), statistics.median(ratios), spread(ratios), _best_ratio(sa, sb),
                  _halves_disagree(sa, sb))


def thread_count() -> int:
    """The threads a launch of torch, or of the cpu target, runs on now."""
    import torch  # noqa: PLC0415
    return torch.get_num_threads()


@contextlib.contextmanager
def threads(n: int):
    """Launches in the block run on `n` threads: torch's ops, and the cpu target's kernels, which
    share torch's OpenMP runtime (the thread count is the calling thread's)."""
    import torch  # noqa: PLC0415
    was = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(was)


def one_thread():
    """Launches in the block run on the calling thread alone (`threads(1)`)."""
    return threads(1)


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all cores from /proc/stat (steal counts as busy: another machine
    on the same core); None where there is no /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            v = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0.0)   # idle, iowait
    return sum(v[:8]) - idle, sum(v[:8])


def others_busy(window_s: float = BUSY_WINDOW_S) -> float:
    """How many cores other work used while this process slept for `window_s`: what a parallel
    launch of this process would have to wait for. 0.0 where the system does not say (no /proc)."""
    a = _cpu_times()
    time.sleep(window_s)
    b = _cpu_times()
    if a is None or b is None or b[1] <= a[1]:
        return 0.0
    return (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1)


def single_thread_best(fn, budget_s: float = 0.01, most: int = 5) -> float:
    """The fastest of a few calls of `fn()` (already warm) on one thread, for about `budget_s`:
    what the call costs when no thread of it waits for a core."""
    best, spent, n = float("inf"), 0.0, 0
    with one_thread():
        while n < most and (n == 0 or spent < budget_s):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            best, spent, n = min(best, dt), spent + dt, n + 1
    return best


def implausible(t: Timing, single: float | None) -> str | None:
    """Why `t` cannot be the call's speed (None: it can): its fastest sample far slower than one
    thread (`single`, from single_thread_best), or its median far above its fastest sample."""
    if single is not None and t.best > PARALLEL_FACTOR * single and t.best - single > SLOW_BY:
        return (f"took {t.best * 1e3:.3g} ms at best, {t.best / single:.0f}x its {single * 1e3:.3g} ms on one "
                "thread: its threads waited for busy cores")
    if t.seconds > ERRATIC_FACTOR * t.best:
        return f"its median sample is {t.seconds / t.best:.1f}x its fastest: the machine's speed moved under it"
    return None


def _doubt(m, singles) -> str | None:
    """Why measurement `m` is not believed: a side that waited for cores; for a pair, fastest
    samples whose ratio the odd and the even pairs disagree on; for one timing, a median far
    above its fastest sample."""
    if isinstance(m, Paired):
        for t, s in zip((m.a, m.b), singles):
            why = implausible(t, s) if s is not None else None
            if why and "one thread" in why:
                return why
        if m.best_spread > UNSETTLED:
            return (f"the ratio of its fastest samples differs by {m.best_spread:.0%} between the odd and the even "
                    f"pairs after {m.a.samples}: busy spells hit the samples")
        return None
    return implausible(m, singles[0])


@dataclasses.dataclass(frozen=True)
class Checked:
    """A measurement (Timing, or Paired) and what the checks made of it."""

    m: Timing | Paired
    why: str | None = None     # why it is not believed (None: it is)
    one_thread: bool = False   # taken on one thread: the parallel runs waited for busy cores


def checked(measure, fns, retries: int = RETRIES) -> Checked:
    """`measure()` (a Timing, or a Paired of `fns` = (fn_a, fn_b)) re-taken while it is implausible
    against one-thread runs of `fns`. When the parallel runs keep waiting for busy cores, it is
    taken once more on one thread (the comparison still holds there: both sides of a pair run
    alike); what stays implausible comes back with the reason. Calls of LONG_S or more are not
    compared with one thread: the check would cost more than it can find."""
    singles: list[float | None] = [None] * len(fns)
    why = None
    for attempt in range(retries + 1):
        m = measure()
        parts = (m.a, m.b) if isinstance(m, Paired) else (m,)
        for i, (t, f) in enumerate(zip(parts, fns)):
            if t.best < LONG_S:
                one = single_thread_best(f)
                singles[i] = one if singles[i] is None else min(singles[i], one)
        why = _doubt(m, singles)
        if why is None:
            return Checked(m)
        if attempt < retries:
            time.sleep(0.1 * (attempt + 1))   # let a burst of other work pass
    # the typical parallel call waited for a core: compare on one thread, where nothing waits
    if any(s is not None and t.seconds > PARALLEL_FACTOR * s and t.seconds - s > SLOW_BY
           for t, s in zip(parts, singles)):
        with one_thread():
            m = measure()
        return Checked(m, _doubt(m, [None] * len(fns)), one_thread=True)
    return Checked(m, why)
