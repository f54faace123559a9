"""`triton.runtime.jit`."""
from ..jit import JITFunction, KernelInterface, KernelParam, jit  # noqa: F401
