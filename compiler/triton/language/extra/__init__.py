"""`triton.language.extra`: the libdevice namespaces."""
from . import cuda, hip, libdevice  # noqa: F401
