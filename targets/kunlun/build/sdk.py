"""Where the Kunlun runtime (libxpurt) and collective library (libbkcl) are installed, if anywhere.

Roots are searched in this order: the component's own root (`XRE_DIR` for the runtime, `BKCL_DIR`
for BKCL: both ship apart from XTDK in public packaging), then `XTDK_DIR`, then the root of an
XTDK `clang++` on PATH (the rule of toolchain.find_xtdk). In a root the library is looked for in
`lib/` and then `so/`, the header in `include/xpu/`. Nothing here loads or runs anything: callers
use `find_*` to decide, and `load` in xpurt.py / bkcl.py to bind.
"""
from __future__ import annotations

import dataclasses
import os

from . import toolchain

LIB_DIRS = ("lib", "so")


@dataclasses.dataclass(frozen=True)
class Component:
    """One installed SDK library: the shared object and the include dir holding `xpu/<header>`."""

    name: str            # "runtime" or "bkcl"
    library: str         # absolute path of libxpurt.so / libbkcl.so
    include_dir: str     # the dir to pass as -I (contains xpu/runtime.h or xpu/bkcl.h)
    header: str          # absolute path of the header


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    soname: str
    header: str          # relative to include/
    own_env: str


RUNTIME = _Spec("runtime", "libxpurt.so", "xpu/runtime.h", "XRE_DIR")
BKCL = _Spec("bkcl", "libbkcl.so", "xpu/bkcl.h", "BKCL_DIR")


def _roots(spec: _Spec) -> list[tuple[str, str]]:
    """(where it came from, root dir) in search order."""
    out = []
    for env in (spec.own_env, "XTDK_DIR"):
        if os.environ.get(env):
            out.append((f"${env}", os.environ[env]))
    clang = toolchain.find_xtdk()
    if clang:
        out.append(("XTDK clang++ on PATH", os.path.dirname(os.path.dirname(clang))))
    return out


def _search(spec: _Spec) -> tuple[Component | None, str]:
    """The component, or None and a sentence saying what is missing where and what to set."""
    roots = _roots(spec)
    partial = []
    for origin, root in roots:
        lib = next((p for d in LIB_DIRS if os.path.isfile(p := os.path.join(root, d, spec.soname))), None)
        header = os.path.join(root, "include", spec.header)
        if lib and os.path.isfile(header):
            return Component(spec.name, lib, os.path.join(root, "include"), header), ""
        if lib:
            # the header is needed too: enum values are read from it, never guessed
            partial.append(f"{lib} is there but {header} is not")
    where = ("looked in " + ", ".join(f"{origin}={root}" for origin, root in roots)) if roots else \
        f"XTDK_DIR and {spec.own_env} are unset and no XTDK clang++ is on PATH"
    what = "; ".join(partial) if partial else f"{spec.soname} not found"
    return None, (f"{what} ({where}); set XTDK_DIR to the XTDK root, or {spec.own_env} to a root with "
                  f"lib/{spec.soname} (or so/{spec.soname}) and include/{spec.header}")


def find_runtime() -> tuple[Component | None, str]:
    return _search(RUNTIME)


def find_bkcl() -> tuple[Component | None, str]:
    return _search(BKCL)


def host_compiler_reason() -> str:
    """Why the enum shim cannot be built ('' when it can)."""
    if toolchain.cpu_toolchain.find_compiler() is None:
        return "no host C++ compiler to build the enum shim against the SDK headers (install g++ or set CXX)"
    return ""


def runtime_available() -> tuple[bool, str]:
    """(True, '') when libxpurt, its header and a host compiler for the shim are all present."""
    comp, why = find_runtime()
    if comp is None:
        return False, f"Kunlun XPU runtime binding: {why}"
    why = host_compiler_reason()
    return (False, f"Kunlun XPU runtime binding: {why}") if why else (True, "")


def bkcl_available() -> tuple[bool, str]:
    """(True, '') when the runtime binding and libbkcl with its header are present."""
    ok, why = runtime_available()
    comp, bwhy = find_bkcl()
    if comp is None:
        return False, f"BKCL binding: {bwhy}" + ("" if ok else f"; and the {why}")
    return ok, why
