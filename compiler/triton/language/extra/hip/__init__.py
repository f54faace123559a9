"""`triton.language.extra.hip`: the HIP libdevice namespace (the same functions as extra.libdevice)."""
from . import libdevice  # noqa: F401
