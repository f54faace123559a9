"""tilejit's top-level package names, and telling them from other distributions' packages of the
same name: the package index has other projects that install a top-level `kernels` (Hugging
Face's kernel hub), `compiler` or `runtime`. pip does not warn when two distributions write the
same files: installing one overwrites the other's `__init__.py`, and uninstalling it deletes it.

Each of tilejit's packages carries a marker, ``__tilejit__ = True``; a package of one of these names
without it is someone else's (or what is left of tilejit's after such an overwrite). The check reads
the package's `__init__.py` and never imports it: a foreign package may not even import. tilejit's
`kernels` deliberately has no ``__version__``: transformers looks for Hugging Face's `kernels` by
that name, and a ``__version__`` would make it take tilejit's package for that one.
"""
from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import re
import sys
import types

from .errors import TilejitError

PACKAGES = ("compiler", "kernels", "targets", "runtime")
MARKER = "__tilejit__"
DISTRIBUTION = "tilejit"


class NameClashError(TilejitError):
    """A top-level name tilejit uses resolves to another distribution's package."""


def providers(name: str) -> list[str]:
    """'dist version' of every installed distribution whose files include top-level package `name`."""
    try:
        dists = metadata.packages_distributions().get(name, [])
    except Exception:  # noqa: BLE001 - a broken environment: nothing to report
        return []
    out = []
    for d in sorted(set(dists)):
        try:
            out.append(f"{d} {metadata.version(d)}")
        except metadata.PackageNotFoundError:
            out.append(d)
    return out


_MARKER_LINE = re.compile(rf"^{MARKER} = True\b", re.M)


def is_tilejit(module) -> bool:
    if getattr(module, MARKER, False) is True:
        return True
    path = getattr(module, "__file__", None)
    try:
        return path is not None and bool(_MARKER_LINE.search(open(path, encoding="utf-8").read()))
    except OSError:
        return False


def find(name: str):
    """The module `name` as imported, or a stand-in with its `__file__` / `__path__` from the import
    system's search (nothing is executed); None when nothing of that name is found."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    stand_in = types.ModuleType(name)
    if spec.has_location and spec.origin:
        stand_in.__file__ = spec.origin
    stand_in.__path__ = list(spec.submodule_search_locations or [])
    return stand_in


def clash_message(name: str, module) -> str:
    """Why `module` (imported as `name`) is not tilejit's, which distributions install `name`, and the fix."""
    where = getattr(module, "__file__", None)
    if where is None:
        what = (f"the package '{name}' at {', '.join(getattr(module, '__path__', [])) or '?'} has no "
                f"__init__.py: tilejit's {name}/__init__.py was deleted (uninstalling another distribution that "
                "had overwritten it does that)")
    else:
        what = f"the package '{name}' at {where} is not tilejit's (it lacks tilejit's marker)"
    others = [p for p in providers(name) if p.split()[0].lower() != DISTRIBUTION]
    found = f"distributions here that install a top-level '{name}': {', '.join(providers(name)) or 'none recorded'}"
    fix = (f"Fix: `pip uninstall {' '.join(p.split()[0] for p in others)}` and then " if others else "Fix: ") + \
        ("reinstall tilejit (`pip install --force-reinstall --no-deps tilejit`, or `.` in its checkout); or keep "
         f"the other '{name}' package in a separate virtual environment")
    return f"{what}; {found}. Two distributions with a package of one name overwrite each other's files. {fix}."


def check(name: str) -> None:
    """Raises NameClashError when `name` (one of PACKAGES) resolves to a package that is not tilejit's."""
    module = find(name)
    if module is not None and not is_tilejit(module):
        raise NameClashError(clash_message(name, module))


def clash_for(ref: str) -> NameClashError | None:
    """For a "module:attr" reference into one of tilejit's packages that failed to load: the clash
    behind it, if the package is someone else's (else None: the failure has another cause)."""
    top = ref.partition(":")[0].split(".")[0]
    if top not in PACKAGES:
        return None
    try:
        check(top)
    except NameClashError as e:
        return e
    return None
