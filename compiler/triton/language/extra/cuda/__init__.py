"""`triton.language.extra.cuda`: the CUDA libdevice namespace (the same functions as extra.libdevice)."""
from . import libdevice  # noqa: F401
