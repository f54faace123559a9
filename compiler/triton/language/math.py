"""`triton.language.math`: the math functions, by name, onto tilejit's builtins (see _names.py)."""
from ._names import MATH as _MATH
from ._names import lookup as _lookup


def __getattr__(name):
    return _lookup("triton.language.math", name, _MATH)


def __dir__():
    return sorted(_MATH)
