"""Builds `.xpu` sources. With XTDK (sdk.find_xtdk), the device build as public build files have
it (`xtdk_commands`); without it, the same text as C++ with the system compiler against
xpu_emulation.h (host emulation). Mode, compiler version and SDK roots go into the fingerprint."""
from __future__ import annotations

import functools
import os
import platform
import subprocess

from compiler.cache import compiler_tmpdir
from compiler.errors import TargetError
from targets.cpu import toolchain as cpu_toolchain

from ..arch import Arch
from ..codegen import lint
from . import sdk

HEADER_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "include")   # tilejit_xpu.h, xpu_emulation.h
# -O1: an emulation build checks a kernel rather than times it, and builds 1.5x faster than at -O2;
# no flag here changes a result bit (no fast-math, no contraction), so strict stays bitwise cpu's.
# -fno-ivopts: GCC's induction-variable rewrite turns a loop that writes an LM row over another
# view of it (fp16/bf16 widened in place: floats at 4 bytes a step over halves read at 2) into
# stores addressed from a null base; the function summaries made after it (pure-const, modref)
# then see no store through the argument, call the helper free of side effects and delete every
# call, so a tile fetched ahead was never widened (GCC 12 at -O2: FlagGems' softmax gave inf in fast)
EMU_FLAGS = ["-O1", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-fwrapv", "-fno-math-errno",
             "-fno-trapping-math", "-ffp-contract=off", "-fno-strict-aliasing", "-fno-ivopts"]


@functools.lru_cache(maxsize=None)
def _version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def mode() -> str:
    return "xtdk" if sdk.find_xtdk() else "emulation"


def fingerprint(arch: Arch) -> dict:
    xtdk = sdk.find_xtdk()
    if xtdk:
        return {"mode": "xtdk", "arch": arch.name, "xtdk": _version(xtdk), "xtdk_dir": os.environ.get("XTDK_DIR"),
                "flags": DEVICE_FLAGS, "host": host_flags(), "sdk": [c.include_dir for c in sdk_components()[0]]}
    # "cxx" is None without a host compiler: the target then takes it from the cache's entries
    cxx = None if cpu_toolchain.missing() else cpu_toolchain.find_compiler()
    return {"mode": "emulation", "arch": arch.name, "cxx": _version(cxx) if cxx else None,
            "flags": EMU_FLAGS + _emulation_defines(arch)}


def _emulation_defines(arch: Arch) -> list[str]:
    # the LM budget the emulation checks, and the arch macro XTDK defines for --xpu-arch
    return [f"-DTJ_EMU_LM_BUDGET={arch.lm_budget}", f"-DTJ_EMU_SM_BYTES={arch.sm_bytes_per_cluster}",
            f"-D__arch_{arch.name}__"]


def emulation_command(arch: Arch, source: str, out: str) -> list[str]:
    why = cpu_toolchain.missing()
    if why:
        raise TargetError(f"the kunlun target's host emulation needs a C++ compiler to build: {why}")
    return [cpu_toolchain.find_compiler(), *EMU_FLAGS, *_emulation_defines(arch), f"-I{HEADER_DIR}",
            "-include", os.path.join(HEADER_DIR, "xpu_emulation.h"), "-x", "c++", source, "-o", out]


# Device-code flags: -fno-builtin and an explicit host sysroot/target as Paddle's cmake/xpu_kp.cmake
# builds them; -fix-mfence=all and -fxpu-launch-return as FastDeploy's plugin build; and no
# contraction of a separate multiply and add into an fma, which would change strict's bits.
DEVICE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fno-builtin", "-ffp-contract=off", "-mllvm", "-fix-mfence=all",
                "-fxpu-launch-return"]


def host_flags() -> list[str]:
    """`--sysroot`/`--target` for the host half of an .xpu build: the gcc tree XTDK's host side is
    built against (`HOST_SYSROOT`, Paddle's name for it) and its triple (`API_ARCH`, default
    x86_64-baidu-linux-gnu on x86_64). Without HOST_SYSROOT, clang's own host defaults."""
    root = os.environ.get("HOST_SYSROOT")
    if not root:
        return []
    triple = os.environ.get("API_ARCH") or ("x86_64-baidu-linux-gnu" if platform.machine() == "x86_64" else "")
    return [f"--sysroot={root}"] + ([f"--target={triple}"] if triple else [])


def sdk_components() -> tuple[list[sdk.Component], list[str]]:
    """(the runtime and XDNN components found, a reason for each one missing)."""
    found, missing = [], []
    for comp, why in (sdk.find_runtime(), sdk.find_xdnn()):
        if comp:
            found.append(comp)
        else:
            missing.append(why)
    return found, missing


def xtdk_commands(clang: str, arch: Arch, source: str, out_dir: str) -> list[list[str]]:
    """Device object + host wrapper, then the shared object linked against XRE's libxpurt (from its
    `so/` or `lib/` dir). Not run on any machine this project has been tested on (no XTDK)."""
    found, missing = sdk_components()
    if missing:
        raise TargetError("kunlun: XTDK found at {} but the build needs more of the SDK: {}".format(
            clang, "; ".join(missing)))
    xtdk_root = os.path.dirname(os.path.dirname(clang))
    runtime = next(c for c in found if c.name == "runtime")
    includes = [HEADER_DIR, os.path.join(xtdk_root, "include")] + [c.include_dir for c in found]
    includes = list(dict.fromkeys(includes))   # one -I per dir, in order
    base = os.path.join(out_dir, "kernel")
    lib_dir = os.path.dirname(runtime.library)
    return [[clang, f"--xpu-arch={arch.name}", *host_flags(), *DEVICE_FLAGS, *(f"-I{d}" for d in includes),
             "-c", source, "--basename", base],
            [clang, *host_flags(), "-shared", "-fPIC", base + ".device.bin.o", base + ".o", f"-L{lib_dir}", "-lxpurt",
             f"-Wl,-rpath,{lib_dir}", "-o", os.path.join(out_dir, "kernel.so")]]


def build(arch: Arch, source: str, out_dir: str) -> str:
    """Builds `source` (an .xpu file) into out_dir/kernel.so; returns the mode used. Under emulation
    the dialect lint runs first: the host compiler accepts what XTDK would refuse, so the
    emulation refuses it here."""
    xtdk = sdk.find_xtdk()
    if not xtdk:
        with open(source) as f:
            broken = lint.lint(f.read())
        if broken:
            raise TargetError("kunlun: the generated source breaks the XPU dialect rules XTDK enforces:\n" + "\n".join(
                f"  {rule}: {lint.RULES[rule].says}: {text}" for rule, text in broken[:10]))
    cmds = xtdk_commands(xtdk, arch, source, out_dir) if xtdk else \
        [emulation_command(arch, source, os.path.join(out_dir, "kernel.so"))]
    for cmd in cmds:
        with compiler_tmpdir(out_dir) as env:   # the compiler's temporaries stay in the build dir
            res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if res.returncode != 0:
            raise TargetError(f"kunlun build failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    return "xtdk" if xtdk else "emulation"
