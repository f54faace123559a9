"""Where the Kunlun SDK is installed, if anywhere: XTDK (the device compiler, `clang++
--xpu-arch`), XRE (the runtime, libxpurt), XDNN (kernel headers such as `xpu/kernel/cluster.h`) and
BKCL (collectives).

XTDK is `XTDK_DIR/bin/clang++`, else a `clang++` on PATH that accepts `--xpu-arch`. A component
is searched for in this order: its own root (`XRE_DIR`, `XDNN_DIR`, `BKCL_DIR`: public packaging
ships them apart from XTDK), then `XTDK_DIR`, then the root of the XTDK `clang++`. In a root the
library is looked for in `lib/` and then `so/`, the header under `include/`. Nothing here loads or
runs anything but `clang++ --version`: callers use `find_*` to decide, `load` in xpurt.py /
bkcl.py to bind, and toolchain.py to build.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess

from targets.cpu import toolchain as cpu_toolchain


@functools.lru_cache(maxsize=None)
def _accepts_xpu_arch(clang: str) -> bool:
    try:
        res = subprocess.run([clang, "--xpu-arch=xpu3", "--version"], capture_output=True, text=True,
                             timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def find_xtdk() -> str | None:
    """Path of XTDK's clang++, or None."""
    root = os.environ.get("XTDK_DIR")
    if root:
        cand = os.path.join(root, "bin", "clang++")
        if os.access(cand, os.X_OK):
            return cand
    cand = shutil.which("clang++")
    if cand and _accepts_xpu_arch(cand):
        return cand
    return None


LIB_DIRS = ("lib", "so")


@dataclasses.dataclass(frozen=True)
class Component:
    """One installed SDK library: the shared object and the include dir holding `xpu/<header>`."""

    name: str            # "runtime", "xdnn" or "bkcl"
    library: str | None  # absolute path of libxpurt.so / libbkcl.so (None: headers only)
    include_dir: str     # the dir to pass as -I (contains xpu/runtime.h or xpu/bkcl.h)
    header: str          # absolute path of the header


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    soname: str | None   # None: a headers-only component
    header: str          # relative to include/
    own_env: str


RUNTIME = _Spec("runtime", "libxpurt.so", "xpu/runtime.h", "XRE_DIR")
BKCL = _Spec("bkcl", "libbkcl.so", "xpu/bkcl.h", "BKCL_DIR")
XDNN = _Spec("xdnn", None, "xpu/kernel/cluster.h", "XDNN_DIR")   # only its headers are used


def _roots(spec: _Spec) -> list[tuple[str, str]]:
    """(where it came from, root dir) in search order."""
    out = []
    for env in (spec.own_env, "XTDK_DIR"):
        if os.environ.get(env):
            out.append((f"${env}", os.environ[env]))
    clang = find_xtdk()
    if clang:
        out.append(("XTDK clang++ on PATH", os.path.dirname(os.path.dirname(clang))))
    return out


def _search(spec: _Spec) -> tuple[Component | None, str]:
    """The component, or None and a sentence saying what is missing where and what to set."""
    roots = _roots(spec)
    partial = []
    for origin, root in roots:
        header = os.path.join(root, "include", spec.header)
        if spec.soname is None:
            if os.path.isfile(header):
                return Component(spec.name, None, os.path.join(root, "include"), header), ""
            continue
        lib = next((p for d in LIB_DIRS if os.path.isfile(p := os.path.join(root, d, spec.soname))), None)
        if lib and os.path.isfile(header):
            return Component(spec.name, lib, os.path.join(root, "include"), header), ""
        if lib:
            # the header is needed too: enum values are read from it, never guessed
            partial.append(f"{lib} is there but {header} is not")
    where = ("looked in " + ", ".join(f"{origin}={root}" for origin, root in roots)) if roots else \
        f"XTDK_DIR and {spec.own_env} are unset and no XTDK clang++ is on PATH"
    what = "; ".join(partial) if partial else f"{spec.soname or 'include/' + spec.header} not found"
    has = f"lib/{spec.soname} (or so/{spec.soname}) and " if spec.soname else ""
    return None, (f"{what} ({where}); set XTDK_DIR to the XTDK root, or {spec.own_env} to a root with "
                  f"{has}include/{spec.header}")


def find_runtime() -> tuple[Component | None, str]:
    return _search(RUNTIME)


def find_bkcl() -> tuple[Component | None, str]:
    return _search(BKCL)


def find_xdnn() -> tuple[Component | None, str]:
    return _search(XDNN)


def host_compiler_reason() -> str:
    """Why the enum shim cannot be built ('' when it can)."""
    if cpu_toolchain.find_compiler() is None:
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
