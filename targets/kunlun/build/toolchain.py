"""Builds `.xpu` sources. With XTDK (`XTDK_DIR`, else a `clang++` on PATH that accepts
`--xpu-arch`), the real toolchain; without it, the same text as C++ with the system compiler
against xpu_emulation.h (host emulation). Mode and compiler version go into the fingerprint."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

from compiler.cache import compiler_tmpdir
from compiler.errors import TargetError
from targets.cpu import toolchain as cpu_toolchain

from ..arch import Arch

HEADER_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "include")   # tilejit_xpu.h, xpu_emulation.h
EMU_FLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-fwrapv", "-fno-math-errno",
             "-fno-trapping-math", "-ffp-contract=off", "-fno-strict-aliasing"]


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


@functools.lru_cache(maxsize=None)
def _version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def mode() -> str:
    return "xtdk" if find_xtdk() else "emulation"


def fingerprint(arch: Arch) -> dict:
    xtdk = find_xtdk()
    if xtdk:
        return {"mode": "xtdk", "arch": arch.name, "xtdk": _version(xtdk), "xtdk_dir": os.environ.get("XTDK_DIR")}
    cxx = cpu_toolchain.find_compiler()
    return {"mode": "emulation", "arch": arch.name, "cxx": _version(cxx) if cxx else None,
            "flags": EMU_FLAGS + [f"-DTJ_EMU_LM_BUDGET={arch.lm_budget}"]}


def emulation_command(arch: Arch, source: str, out: str) -> list[str]:
    cxx = cpu_toolchain.find_compiler()
    if cxx is None:
        raise TargetError("the kunlun target's host emulation needs a C++ compiler (install g++ or set CXX)")
    return [cxx, *EMU_FLAGS, f"-DTJ_EMU_LM_BUDGET={arch.lm_budget}", f"-I{HEADER_DIR}",
            "-include", os.path.join(HEADER_DIR, "xpu_emulation.h"), "-x", "c++", source, "-o", out]


def xtdk_commands(clang: str, arch: Arch, source: str, out_dir: str) -> list[list[str]]:
    """Device object + host wrapper, as public build files do it (docs/kunlun.md, Sources). Not run here."""
    root = os.path.dirname(os.path.dirname(clang))
    base = os.path.join(out_dir, "kernel")
    return [[clang, f"--xpu-arch={arch.name}", "-c", source, "--basename", base, "-fno-builtin",
             "-mllvm", "-fix-mfence=all", "-fxpu-launch-return", f"-I{HEADER_DIR}", "-fPIC", "-O2"],
            [clang, "-shared", "-fPIC", base + ".device.bin.o", base + ".o", f"-L{os.path.join(root, 'lib')}",
             "-lxpurt", "-o", os.path.join(out_dir, "kernel.so")]]


def build(arch: Arch, source: str, out_dir: str) -> str:
    """Builds `source` (an .xpu file) into out_dir/kernel.so; returns the mode used."""
    xtdk = find_xtdk()
    cmds = xtdk_commands(xtdk, arch, source, out_dir) if xtdk else \
        [emulation_command(arch, source, os.path.join(out_dir, "kernel.so"))]
    for cmd in cmds:
        with compiler_tmpdir(out_dir) as env:   # the compiler's temporaries stay in the build dir
            res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if res.returncode != 0:
            raise TargetError(f"kunlun build failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    return "xtdk" if xtdk else "emulation"
