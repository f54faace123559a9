"""`triton.runtime`: the driver stubs host code reads, and the autotuner / jit classes."""
from ..autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from ..jit import JITFunction, KernelInterface  # noqa: F401
from . import autotuner, driver, errors, jit  # noqa: F401
from .driver import driver as _driver_obj  # noqa: F401
from .errors import OutOfResources  # noqa: F401

driver = _driver_obj   # `triton.runtime.driver.active` (the object; its module is runtime.driver)
