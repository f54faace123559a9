"""`triton.runtime.jit`."""
from ..jit import JITFunction, KernelInterface, KernelParam, TensorWrapper, jit, reinterpret  # noqa: F401
