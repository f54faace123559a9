"""Target plugin metadata and version checks (the plugin interface itself: protocol.py).

Requirements are checked once per plugin object before its first use (`get_target`), so a
toolchain that is too old fails with one message naming the plugin, what it needs and what was
found, instead of a compiler error deep inside a build. Checks are cached; registering or
checking a plugin twice does nothing new.

A requirement only builds need (`needed_for="build"`: the C++ compiler of the cpu target and of
Kunlun's host emulation) does not keep the target from being used: where it is missing or too old,
the target runs the kernels already in the kernel cache (a deployment image without a compiler),
and a build fails with `build_problem`'s reason (compiler/cache_miss.py words the error).
"""
from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import threading
from typing import Callable

from ..errors import TargetError
from .protocol import TargetPlugin

_VERSION_RE = re.compile(r"\d+(?:\.\d+)+|\d+")


class PluginVersionError(TargetError):
    """A plugin's declared toolchain/driver requirement is not met here."""

    def __init__(self, plugin: str, plugin_version: str, requirement: str, minimum: str, found: str | None,
                 hint: str = ""):
        self.plugin, self.requirement, self.minimum, self.found = plugin, requirement, minimum, found
        got = f"found {found}" if found else "found none"
        msg = (f"target plugin '{plugin}' {plugin_version} requires {requirement} >= {minimum}, but {got}"
               + (f"; {hint}" if hint else ""))
        super().__init__(msg)


@dataclasses.dataclass(frozen=True)
class Requirement:
    """`what` (e.g. "C++ compiler") must be at least `minimum`. `probe()` returns a description of
    what is installed (e.g. "g++ (Debian 12.2.0-14) 12.2.0 at /usr/bin/g++") or None when nothing
    is; the version compared is the first dotted number in that description unless `probe`
    returns a (version, description) pair."""

    what: str
    minimum: str
    probe: Callable[[], object]
    hint: str = ""
    needed_for: str = "use"   # "build": only compiling needs it; cached kernels run without it

    def found(self) -> tuple[tuple[int, ...] | None, str | None]:
        """(parsed version, description) of what is installed; (None, None) when nothing is."""
        try:
            res = self.probe()
        except TargetError as e:   # a deliberate message (e.g. CXX names no compiler): shown as it is
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - a failing probe is reported, not raised
            return None, f"an error while probing ({type(e).__name__}: {e})"
        if res is None:
            return None, None
        if isinstance(res, tuple):
            ver, desc = res
            return parse_version(ver), desc
        return parse_version(str(res)), str(res)

    def check(self) -> tuple[bool, str | None]:
        """(satisfied, description of what was found)."""
        ver, desc = self.found()
        if ver is None:
            return False, desc
        return ver >= parse_version(self.minimum), desc


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """The first dotted number in `text` as a tuple ("g++ (GCC) 12.2.1 20230201" -> (12, 2, 1))."""
    if not text:
        return None
    m = _VERSION_RE.search(text)
    if m is None:
        return None
    parts = tuple(int(p) for p in m.group(0).split("."))
    # (12,) and (12, 0, 0) compare equal: pad so that ">= 12.0" accepts "12"
    return parts + (0,) * (4 - len(parts)) if len(parts) < 4 else parts


@functools.lru_cache(maxsize=None)
def command_version(path: str | None, flag: str = "--version") -> str | None:
    """First line of `path flag` plus where the tool is, or None when there is no tool."""
    if not path:
        return None
    try:
        out = subprocess.run([path, flag], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stdout or out.stderr).strip().splitlines()
    return f"{first[0]} at {path}" if first else None


@dataclasses.dataclass
class PluginInfo:
    """What a plugin declares (see protocol.TargetPlugin)."""

    name: str
    version: str
    device_kinds: tuple[str, ...]
    capabilities: tuple[str, ...]
    requirements: tuple[Requirement, ...]
    device_backend: object = None


def info(name: str, plugin) -> PluginInfo:
    """The metadata of `plugin`; refuses objects that are not target plugins."""
    if not isinstance(plugin, TargetPlugin):
        raise TargetError(f"target plugin '{name}' ({plugin!r}) is not a compiler.target.TargetPlugin (it has no "
                          "create(variant) factory with the plugin metadata); an entry point in 'tilejit.targets' "
                          "must name an instance of a TargetPlugin subclass")
    reqs = tuple(plugin.requirements or ())
    for r in reqs:
        if not isinstance(r, Requirement):
            raise TargetError(f"target plugin '{name}': requirements must be compiler.target.Requirement "
                              f"objects, got {r!r}")
    return PluginInfo(name=str(plugin.name if plugin.name != TargetPlugin.name else name),
                      version=str(plugin.version), device_kinds=tuple(plugin.device_kinds or ()),
                      capabilities=tuple(plugin.capabilities or ()), requirements=reqs,
                      device_backend=plugin.device_backend)


# (name, id(plugin)) -> (plugin, PluginVersionError arguments or None); the plugin is kept so that
# its id cannot be reused by another object while the entry is cached
_checked: dict[tuple[str, int], tuple[object, tuple | None]] = {}
_check_lock = threading.Lock()


def check(name: str, plugin) -> None:
    """Raises PluginVersionError for the first unmet requirement of `plugin`; cached."""
    key = (name, id(plugin))
    with _check_lock:
        hit = _checked.get(key)
        if hit is None:
            meta = info(name, plugin)
            failed = None
            for req in meta.requirements:
                if req.needed_for == "build":
                    continue   # build_problem: the target still runs what the cache holds
                ok, found = req.check()
                if not ok:
                    failed = (name, meta.version, req.what, req.minimum, found, req.hint)
                    break
            hit = _checked[key] = (plugin, failed)
    if hit[1] is not None:
        raise PluginVersionError(*hit[1])   # a fresh exception each time: tracebacks stay short


def availability(name: str, plugin) -> tuple[bool, str]:
    """(usable here, why not): the plugin's own `available()` and then its version requirements."""
    try:
        info(name, plugin)
        ok, why = plugin.available()
    except TargetError as e:
        return False, str(e)
    except Exception as e:  # noqa: BLE001 - a broken probe means "not available", with the reason
        return False, f"available() failed: {type(e).__name__}: {e}"
    if not ok:
        return False, why
    try:
        check(name, plugin)
    except TargetError as e:
        return False, str(e)
    return True, ""


def build_problem(name: str, plugin) -> str | None:
    """Why this machine cannot build `plugin`'s kernels (its first unmet build requirement, in one
    sentence with the fix), or None when it can."""
    for req in getattr(plugin, "requirements", None) or ():
        if getattr(req, "needed_for", "use") != "build":
            continue
        ver, found = req.found()
        if ver is not None and ver >= parse_version(req.minimum):
            continue
        if found is None:
            return f"no {req.what} found" + (f" ({req.hint})" if req.hint else "")
        if ver is None:
            return found   # the probe's own message (e.g. CXX names no compiler)
        return str(PluginVersionError(name, str(plugin.version), req.what, req.minimum, found, req.hint))
    return None


def limited(name: str, plugin) -> str:
    """What works only in part here, in a few words (`python -m targets`, the doctor): the plugin's
    own `limited_here()`, and that only cached kernels run when a build requirement is unmet."""
    own = plugin.limited_here()
    why = build_problem(name, plugin)
    if why is None:
        return own
    cache_only = f"runs the kernels already in the kernel cache, builds none: {why}"
    return f"{own}; {cache_only}" if own else cache_only


def requirement_report(plugin) -> list[tuple[Requirement, bool, str | None]]:
    """(requirement, satisfied, found) for every requirement, for `python -m targets`."""
    out = []
    for r in plugin.requirements or ():
        ok, found = r.check()
        out.append((r, ok, found))
    return out
