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
        pass
    from compiler.frontend_names import MISSING_BUILTINS  # noqa: PLC0415
    if name in MISSING_BUILTINS:   # Triton has it: importable, refused with the alternative at the call
        from ._names import unsupported  # noqa: PLC0415
        return unsupported(f"triton.language.{name}", MISSING_BUILTINS[name])
    raise AttributeError(f"triton.language.{name} is not part of tilejit's tile language (see "
                         "docs/triton.md)") from None
