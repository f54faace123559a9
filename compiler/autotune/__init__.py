"""The autotuner: `python -m compiler.autotune --target cpu` tunes the library ops' block sizes.

    timing.py    paired, checked timings a busy machine cannot fake (also used by benchmarks/)
    tuner.py     tune(space, run, check, key): the generic candidate loop (measure or estimate, store)
    library.py   tune_ops(...): every library op spec (compiler.opspec) on its shapes, through tune()
    prebuild.py  for a target that can neither run nor estimate here: compile the defaults only
    summary.py   the table the command prints
Decisions are stored per config in the kernel cache (compiler.cache.decisions) and read at run
time by the library's `config_for`.
"""
from ..cache.decisions import DecisionStore, clear_memo, lookup
from .library import AutotuneError, load_shapes, tune_ops
from .summary import format_summary
from .tuner import MEASURE_COUNT, DecisionKey, Timing, Tuned, measure_call, time_call, tune

__all__ = ["tune", "tune_ops", "DecisionKey", "Tuned", "AutotuneError", "MEASURE_COUNT", "time_call", "measure_call",
           "Timing", "lookup",
           "DecisionStore", "clear_memo", "load_shapes", "format_summary"]
