"""`triton.language.extra`: the libdevice namespaces."""
from . import cuda, libdevice  # noqa: F401
