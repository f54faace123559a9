"""The one loader of "module:attr" references: target plugins, device backends, stream and event
classes, collective backends and op libraries are all named this way, so that naming one does not
import it (a reference is resolved at its first use, and a broken one fails with its name)."""
from __future__ import annotations

import importlib


class LoadError(ImportError):
    """A "module:attr" reference could not be resolved; the message names it and the cause."""


def load_ref(ref, what: str = "reference"):
    """The object `ref` names ("pkg.mod:attr", or "pkg.mod" for a module); anything that is not a
    string is returned as it is. Raises LoadError naming `what` and `ref` on failure."""
    if not isinstance(ref, str):
        return ref
    mod, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(mod)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - any failure to import is reported with the reference
        raise LoadError(f"{what} {ref!r} failed to load: {type(e).__name__}: {e}") from None
    return obj
