"""`triton.errors`: TritonError, the base of every error raised here."""
from ..errors import TritonError  # noqa: F401
