"""`triton.runtime.errors`: Triton's runtime error classes (compiler/errors.py holds them; tilejit's
own errors derive from TritonError, and its resource errors from OutOfResources)."""
from ...errors import AutotunerError, InterpreterError, OutOfResources, PTXASError, TritonError  # noqa: F401
