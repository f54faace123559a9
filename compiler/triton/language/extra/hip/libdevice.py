"""`triton.language.extra.hip.libdevice`: the same names as `triton.language.extra.libdevice`."""
from ..._names import lookup as _lookup
from ..._names import LIBDEVICE as _NAMES


def __getattr__(name):
    return _lookup("triton.language.extra.hip.libdevice", name)


def __dir__():
    return sorted(_NAMES)
