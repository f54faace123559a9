"""Target registry and selection.

Targets are plugins found through the `tilejit.targets` entry-point group (the built-in ones are
also registered here, so a source checkout works without installing). A target is named
`name` or `name:variant` (`kunlun:xpu2`, `gpu:sm_90`). The default comes from `TILEJIT_TARGET`
(`cpu` when unset); `use_target(...)` overrides it for a block of launches, and
`@kernel(target=...)` for one kernel. The interface a plugin implements is in protocol.py.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from importlib import metadata

from ..errors import TargetError
from ..loader import LoadError, load_ref
from ..names import clash_for
from . import requirements
from .grid import launch_grid
from .protocol import INT32_MAX, Caps, Target, TargetPlugin
from .requirements import PluginVersionError, Requirement, command_version

__all__ = ["INT32_MAX", "Caps", "Target", "TargetPlugin", "Requirement", "PluginVersionError", "command_version", "launch_grid",
           "register_target", "target_names", "get_target", "load_plugin", "available_targets",
           "default_target_name", "current_target", "use_target", "requirements"]

BUILTIN_PLUGINS = {"cpu": "targets.cpu:TARGET", "gpu": "targets.gpu:TARGET", "kunlun": "targets.kunlun:TARGET"}
_plugins: dict[str, TargetPlugin] = {}  # name -> plugin object (has .create(variant))
_plugin_refs: dict[str, str] = {}       # name -> "module:attr" not yet loaded
_instances: dict[str, Target] = {}
_lock = threading.Lock()
_discovered = False
_override: contextvars.ContextVar = contextvars.ContextVar("tilejit_target", default=None)


def register_target(name: str, plugin) -> None:
    """Registers a target plugin object (or a "module:attr" reference) under `name`.
    Registering the same plugin twice is harmless; a different one replaces it."""
    with _lock:
        if isinstance(plugin, str):
            if name not in _plugins:
                _plugin_refs[name] = plugin
        else:
            _plugins[name] = plugin
            _plugin_refs.pop(name, None)
        for key in [k for k in _instances if k.split(":")[0] == name]:
            del _instances[key]


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    for name, ref in BUILTIN_PLUGINS.items():
        register_target(name, ref)
    try:
        eps = metadata.entry_points(group="tilejit.targets")
    except Exception:  # noqa: BLE001 - a broken environment must not break the default target
        eps = []
    for ep in eps:
        register_target(ep.name, ep.value)
    _discovered = True


def _load_plugin(name: str) -> TargetPlugin | None:
    if name in _plugins:
        return _plugins[name]
    ref = _plugin_refs.get(name)
    if ref is None:
        return None
    try:
        obj = load_ref(ref, f"target '{name}'")
    except LoadError as e:
        raise TargetError(str(clash_for(ref) or e)) from None
    _plugins[name] = obj
    return obj


def load_plugin(name: str) -> TargetPlugin:
    """The plugin registered as `name` (entry points discovered first); TargetError if unknown."""
    _discover()
    plugin = _load_plugin(name)
    if plugin is None:
        raise TargetError(f"unknown target '{name}'. Known targets: {', '.join(target_names())}")
    return plugin


def target_names() -> list[str]:
    _discover()
    return sorted(set(_plugins) | set(_plugin_refs))


def get_target(spec: str | Target) -> Target:
    """The Target for `spec` ("cpu", "kunlun:xpu2", ...); a Target object passes through."""
    if not isinstance(spec, str):
        return spec
    inst = _instances.get(spec)
    if inst is not None:
        return inst
    _discover()
    name, _, variant = spec.partition(":")
    plugin = _load_plugin(name)
    if plugin is None:
        raise TargetError(f"unknown target '{spec}'. Available targets: {', '.join(target_names())}. "
                          "Set TILEJIT_TARGET or pass target=... to one of them.")
    requirements.info(name, plugin)
    ok, why = plugin.available()
    if not ok:
        raise TargetError(f"target '{spec}' is not available here: {why}. "
                          f"Available targets: {', '.join(available_targets())}.")
    requirements.check(name, plugin)   # declared toolchain/driver versions, once per plugin, before first use
    inst = plugin.create(variant or None)
    _instances[spec] = inst
    return inst


def available_targets() -> list[str]:
    out = []
    for n in target_names():
        try:
            p = _load_plugin(n)
        except TargetError:
            continue
        if p is not None and requirements.availability(n, p)[0]:
            out.append(n)
    return out


def default_target_name() -> str:
    return os.environ.get("TILEJIT_TARGET", "") or "cpu"


_default = None


def current_target() -> Target:
    """The target launches go to now: `use_target` block, else TILEJIT_TARGET (read at the
    first launch), else cpu."""
    t = _override.get()
    if t is not None:
        return t
    global _default
    if _default is None:
        _default = get_target(default_target_name())
    return _default


@contextlib.contextmanager
def use_target(spec):
    """`with use_target("kunlun:xpu2"): ...` sends launches in the block to that target."""
    token = _override.set(get_target(spec))
    try:
        yield _override.get()
    finally:
        _override.reset(token)
