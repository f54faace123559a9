"""The compiled launch path: `tjfast.c`, a small CPython extension built once per machine and
Python ABI with the system C compiler against Python's headers (about a second, once), into the
kernel cache (or TILEJIT_FASTPATH_DIR, a cache directory for it alone), so it is verified, shared
by processes and shipped by `compiler.cache export` like any entry.

It provides the warm `kfn[grid](...)` dispatch of every kernel (`Dispatcher`), for targets
whose kernels have a packed entry (the cpu target) the launch itself with arguments converted
in C (`Launcher`), and the plan key of a library op call (`signature`, kernels/op_plans.py);
see the C file's header. Where Python's headers or a C compiler are missing (a deployment image),
a copy another machine built for this Python is loaded from the cache (an imported one); where
there is none, or TILEJIT_FAST_LAUNCH=0, or a strict cache holds no copy, everything runs the
Python path (the same checks, a few microseconds more per launch), and one log line says why.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading

from ..cache import CacheError, KernelCache, compiler_tmpdir, stable_hash
from ..cache.store import LAUNCH_PATH

log = logging.getLogger("compiler.fastpath")

_SOURCE = os.path.join(os.path.dirname(__file__), "tjfast.c")
_ABI = 5
_lock = threading.Lock()
_state: dict = {"tried": False, "module": None, "why": None}


def enabled() -> bool:
    return os.environ.get("TILEJIT_FAST_LAUNCH", "1").strip().lower() not in ("0", "false", "no", "off")


def _compiler() -> list[str] | None:
    for cand in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"):
        if cand:
            parts = shlex.split(cand)
            if parts and shutil.which(parts[0]):
                return [shutil.which(parts[0]), *parts[1:]]
    return None


def _version(cc: list[str]) -> str:
    out = subprocess.run([cc[0], "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def _build(cc: list[str], include: str, out_dir: str) -> dict:
    out = os.path.join(out_dir, "_tjfast" + sysconfig.get_config_var("EXT_SUFFIX"))
    with compiler_tmpdir(out_dir) as env:
        cmd = [*cc, "-O2", "-shared", "-fPIC", "-fno-strict-aliasing", f"-I{include}", _SOURCE, "-o", out]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    return {"kernel": LAUNCH_PATH, "target": None, "file": os.path.basename(out),
            "python": sys.version.split()[0]}


def _load(path: str):
    loader = importlib.machinery.ExtensionFileLoader("_tjfast", path)
    spec = importlib.util.spec_from_file_location("_tjfast", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    if getattr(mod, "ABI", None) != _ABI:
        raise ImportError(f"{path} has ABI {getattr(mod, 'ABI', None)}, expected {_ABI}")
    return mod


def _try_load():
    if not enabled():
        return None, "TILEJIT_FAST_LAUNCH=0"
    include = sysconfig.get_paths().get("include") or ""
    with open(_SOURCE, "rb") as f:
        source_hash = hashlib.sha256(f.read()).hexdigest()
    # everything the module depends on but the C compiler: a machine without one (a deployment
    # image) loads a module another machine built for this Python, from an imported cache
    abi = stable_hash({"fastpath": source_hash, "abi": _ABI, "python": sys.version, "include": include,
                       "ext": sysconfig.get_config_var("EXT_SUFFIX")})
    cache = KernelCache(os.environ.get("TILEJIT_FASTPATH_DIR") or os.environ.get("TILEJIT_CACHE_DIR") or None)
    cc = _compiler()
    why = ("no C compiler found (install gcc or set CC)" if cc is None else
           None if os.path.exists(os.path.join(include, "Python.h")) else
           f"Python's headers are not installed (no Python.h in {include or 'the include path'}; install the "
           f"python{sys.version_info[0]}.{sys.version_info[1]}-dev package)")
    try:
        if why:   # nothing to build it with: a copy built for this Python elsewhere, if imported
            entry = _built_elsewhere(cache, abi)
            if entry is None:
                return None, why
        else:
            key = stable_hash({"fastpath": source_hash, "abi": _ABI, "python": sys.version, "include": include,
                               "ext": sysconfig.get_config_var("EXT_SUFFIX"), "cc": _version(cc)})
            entry = cache.get_or_build(key, lambda d: {**_build(cc, include, str(d)), "abi": abi}, counted=False)
        return _load(str(entry.file(entry.meta["file"]))), None
    except (CacheError, OSError, RuntimeError, ImportError, KeyError) as e:
        return None, f"{type(e).__name__}: {e}"


def _built_elsewhere(cache: KernelCache, abi: str):
    """The verified cache entry of a module built for this Python by another machine, or None."""
    for key, meta in cache.manifests():
        if meta.get("kernel") == LAUNCH_PATH and meta.get("abi") == abi:
            entry = cache.lookup(key, counted=False)
            if entry is not None:
                return entry
    return None


def fast_module():
    """The loaded extension module, or None (the reason is logged once; see `why()`)."""
    if _state["tried"]:
        return _state["module"]
    with _lock:
        if not _state["tried"]:
            mod, why = _try_load()
            _state.update(module=mod, why=why, tried=True)
            if mod is None and why != "TILEJIT_FAST_LAUNCH=0":
                log.warning("tilejit: the compiled launch path is unavailable, launches take the Python path "
                            "(a few microseconds more each): %s", why)
    return _state["module"]


def why() -> str | None:
    """Why the compiled launch path is not in use (None when it is, or has not been tried)."""
    return _state["why"]


_NODEFAULT = object()


def make_dispatcher(kfn, current_target, current_policy, dry_var, torch_tensor):
    """The compiled warm path of `kfn` (a KernelFunction whose binding is prepared), or None."""
    mod = fast_module()
    if mod is None:
        return None
    params = list(kfn.signature.parameters.values())
    defaults = tuple(_NODEFAULT if p.default is p.empty else p.default for p in params)
    if len(params) > mod.MAX_PARAMS:
        return None
    return mod.Dispatcher(kfn.compiled, kfn.run, tuple(kfn.arg_names), defaults, _NODEFAULT, kfn.runtime_idx,
                          kfn.constexpr_idx, kfn.target.launch_key if kfn.target is not None else None, kfn.numerics,
                          current_target, current_policy, dry_var, torch_tensor)
