"""`triton.runtime.autotuner`."""
from ..autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
