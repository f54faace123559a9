"""`triton.language.extra.libdevice`: libdevice functions by name onto tilejit's builtins (_names.py)."""
from .._names import lookup as _lookup
from .._names import LIBDEVICE as _NAMES


def __getattr__(name):
    return _lookup("triton.language.extra.libdevice", name)


def __dir__():
    return sorted(_NAMES)
