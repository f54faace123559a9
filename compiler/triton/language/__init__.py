"""`triton.language` as tilejit serves it: the tile language (`compiler.language`, the very same
objects), plus the `math` and `extra.libdevice` / `extra.cuda.libdevice` namespaces."""
from compiler import language as _tl

globals().update({k: v for k, v in vars(_tl).items() if not k.startswith("_")})

from . import extra, math  # noqa: E402,F401  (after the update: `math` is ours, not the stdlib's)

core = _tl   # `triton.language.core.<name>` in host code


def __getattr__(name):
    # names the tile language gains after this module was imported
    try:
        return getattr(_tl, name)
    except AttributeError:
        raise AttributeError(f"triton.language.{name} is not part of tilejit's tile language (see the README's "
                             "supported subset)") from None
