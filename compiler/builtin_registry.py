"""The registry of tile-language builtins: `@builtin` marks a function whose Python body is never
run (the frontend compiles calls to it); compiler.language and compiler.language_combine declare
them."""
from __future__ import annotations

import functools

BUILTINS: dict[str, object] = {}


def builtin(fn):
    """Registers a tile-language builtin; its Python body is never run."""

    @functools.wraps(fn)
    def outside(*args, **kwargs):
        raise RuntimeError(
            f"tl.{fn.__name__} can only be called inside a @kernel function body "
            "(did you forget the @kernel decorator?)")

    outside.__tilejit_builtin__ = fn.__name__
    BUILTINS[fn.__name__] = outside
    return outside
