"""The process-wide settings of the cpu target's grain rule (tj_run_programs in tilejit_cpu.h):
a launch runs its programs on the calling thread unless its serial time (programs x the kernel's
measured time per program) exceeds the grain and twice the recent wake-up delay of a parallel
region. Every launch passes the kernel the address of the one `Parallel` structure below.

TILEJIT_CPU_GRAIN_US (read when the cpu target is first used) sets the grain in microseconds of
serial work: 0 puts every launch of more than one program in parallel, a large value none.
`configure(grain_us=, threads=)` changes it, and the team size, at run time. No bit of any
result depends on either (tests/test_cpu_parallel.py). docs/architecture.md explains the rule.
"""
from __future__ import annotations

import ctypes
import math
import os

from compiler.errors import TargetError

# A parallel region costs about 0.5-5 us on a quiet machine (a futex wake-up of the team, less
# while its threads still spin); below ~10 us of work the second core saves less than that. A busy
# machine is left to the wake-up delay, which grows to a scheduler slice there. On a 2-core AVX-512
# host, from 20 us: rms_norm and layer_norm [16, 4096] fp32 15.2 -> 10.2 us and 18.4 -> 12.3 us (the
# rows of a decode step's norm), the Llama decode step (benchmarks.model_step) unchanged within its
# noise; at 5 us, layer_norm [32, 1024] went parallel too (9.5 -> 8.0 us) but the bf16 decode step
# lost ~4%.
DEFAULT_GRAIN_US = 10.0
# a launch kept serial only by the measured wake-up delay goes parallel, to measure it again, at
# most once per this many delays of wall time: probing costs at most ~2% under load
PROBE_SPACING = 50
_MAX_NS = 1 << 62


class Parallel(ctypes.Structure):
    """tj_parallel of tilejit_cpu.h."""
    _fields_ = [("grain_ns", ctypes.c_int64), ("threads", ctypes.c_int32), ("probe_spacing", ctypes.c_int32),
                ("wait_ns", ctypes.c_int64), ("probe_ns", ctypes.c_int64), ("parallel", ctypes.c_int64),
                ("serial", ctypes.c_int64), ("skipped", ctypes.c_int64)]


def _grain_ns(us: float, source: str) -> int:
    if not (isinstance(us, (int, float)) and us >= 0):   # NaN fails too
        raise TargetError(f"{source} must be a number of microseconds >= 0 (0: every launch in parallel), got {us!r}")
    return _MAX_NS if math.isinf(us) or us * 1000 >= _MAX_NS else int(us * 1000)


def _grain_from_env() -> int:
    raw = os.environ.get("TILEJIT_CPU_GRAIN_US", "").strip()
    if not raw:
        return _grain_ns(DEFAULT_GRAIN_US, "the default grain")
    try:
        us = float(raw)
    except ValueError:
        us = raw
    return _grain_ns(us, f"TILEJIT_CPU_GRAIN_US={raw!r}")


SETTINGS = Parallel(grain_ns=_grain_from_env(), threads=0, probe_spacing=PROBE_SPACING)
ADDRESS = ctypes.addressof(SETTINGS)


def configure(grain_us: float | None = None, threads: int | None = None) -> dict:
    """Sets the grain (microseconds of serial work) and/or the team size (0: OpenMP's default,
    OMP_NUM_THREADS or the core count) for every later cpu launch; returns the previous settings
    as keyword arguments, so `configure(**previous)` restores them."""
    previous = settings()
    if threads is not None and not (isinstance(threads, int) and 0 <= threads <= 4096):
        raise TargetError(f"configure(threads=...) takes an int from 0 (OpenMP's default) to 4096, got {threads!r}")
    if grain_us is not None:
        SETTINGS.grain_ns = _grain_ns(grain_us, "configure(grain_us=...)")
    if threads is not None:
        SETTINGS.threads = threads
    return previous


def settings() -> dict:
    return {"grain_us": math.inf if SETTINGS.grain_ns >= _MAX_NS else SETTINGS.grain_ns / 1000,
            "threads": SETTINGS.threads}


def counts() -> dict:
    """Launches so far: run in parallel, run serially, and of those the ones kept serial by the
    wake-up delay; and the delay's moving average (ns)."""
    return {"parallel": SETTINGS.parallel, "serial": SETTINGS.serial, "skipped": SETTINGS.skipped,
            "wait_ns": SETTINGS.wait_ns}
