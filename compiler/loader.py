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
    except ModuleNotFoundError as e:
        if e.name is None or not (mod == e.name or mod.startswith(e.name + ".")):
            raise _failed(what, ref, e) from e   # a module the named one imports is missing
        raise _failed(what, ref, e) from None    # the reference names no module: its message says all
    except Exception as e:  # noqa: BLE001 - the module failed while it ran: its traceback is the report
        raise _failed(what, ref, e) from e
    for part in attr.split(".") if attr else ():
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise _failed(what, ref, e) from None
    return obj


def _failed(what: str, ref: str, e: BaseException) -> LoadError:
    return LoadError(f"{what} {ref!r} failed to load: {type(e).__name__}: {e}")
