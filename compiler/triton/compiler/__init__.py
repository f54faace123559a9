"""`triton.compiler`: the error classes host code imports from it."""
from . import errors  # noqa: F401
from .errors import CompilationError  # noqa: F401
