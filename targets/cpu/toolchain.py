"""Builds generated C++ into a shared library with the system compiler (`CXX`, else g++,
else c++, else clang++). The compiler's version, the flags and the host ISA form the target fingerprint."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess

from compiler.cache import compiler_tmpdir
from compiler.errors import TargetError

HEADER_DIR = os.path.dirname(__file__)
# -fwrapv: Triton's integers wrap; -fno-math-errno and -fno-trapping-math (no FP traps are ever enabled)
# let sqrt and floor vectorise without changing any result; contraction stays off so
# a*b+c rounds twice, as written (explicit fma where the kernel or the dot asks for one).
BASE_FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-fwrapv", "-fno-math-errno", "-fno-trapping-math",
              "-ffp-contract=off", "-fno-strict-aliasing"]


def find_compiler() -> str | None:
    """The C++ compiler: `CXX` when set (an error when it is not found: a silent fallback would
    build with a compiler the user did not choose), else g++, c++ or clang++ from PATH, else None."""
    return _find_compiler(os.environ.get("CXX", "").strip())


@functools.lru_cache(maxsize=None)
def _find_compiler(cxx: str) -> str | None:
    if cxx:
        found = shutil.which(cxx)
        if found is None:
            raise TargetError(f"CXX={cxx} is set, but {cxx!r} is not an executable on PATH; install it, point "
                              "CXX at the full path of a C++ compiler, or unset CXX to use g++")
        return found
    for cand in ("g++", "c++", "clang++"):
        if shutil.which(cand):
            return shutil.which(cand)
    return None


def missing() -> str | None:
    """Why no C++ compiler is usable here (none on PATH, or CXX names none), or None."""
    try:
        return None if find_compiler() else "no C++ compiler found (install g++ or clang++ >= 9, or set CXX)"
    except TargetError as e:
        return str(e)


def march_flags() -> list[str]:
    # TILEJIT_CPU_ARCH pins the ISA (e.g. x86-64-v3) for caches shipped to other hosts; set but
    # empty means unset, as for the shell's own defaults
    arch = os.environ.get("TILEJIT_CPU_ARCH", "").strip() or "native"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", arch):
        raise TargetError(f"TILEJIT_CPU_ARCH={arch!r} is not an architecture name: set it to one the C++ "
                          "compiler's -march takes (native, x86-64-v3, skylake-avx512, ...) or unset it")
    if platform.machine() not in ("x86_64", "AMD64"):
        return [f"-mcpu={arch}"]
    # loops vectorise 256 bits wide on every x86 host with AVX: gcc's tuning for AMD Zen 1 prefers
    # 128; there 256 measured 1.2x faster on layer_norm fp32 [32, 4096] (1.07x on [4096, 4096]),
    # 0.94x on bf16 [4096, 4096] (its widening and narrowing cross 128-bit lanes). AVX-512 tunings
    # already choose 256 (the micro-kernels' explicit 512-bit vectors are not affected)
    return [f"-march={arch}", "-mprefer-vector-width=256"]


def predefined_macros() -> frozenset[str]:
    """The macros the compiler predefines for the target's -march flags (the ISA extensions a build
    may use: __AVX512F__, __AMX_BF16__, ...); empty where no compiler is usable."""
    cxx = None if missing() else find_compiler()
    return _macros(cxx, tuple(march_flags())) if cxx else frozenset()


@functools.lru_cache(maxsize=None)
def _macros(cxx: str, arch: tuple[str, ...]) -> frozenset[str]:
    out = subprocess.run([cxx, *arch, "-dM", "-E", "-x", "c++", os.devnull], capture_output=True, text=True,
                         check=False)
    return frozenset(line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define "))


def amx_bf16_dot() -> bool:
    """Whether the header's bf16 dot runs on AMX tiles in this process: the build's ISA has AMX-BF16
    (tilejit_cpu.h compiles the path) and Linux lends the process the tile registers (the kernel
    asks the same once; where it is refused, the dot runs vdpbf16ps)."""
    return {"__AMX_TILE__", "__AMX_BF16__", "__AVX512BF16__"} <= predefined_macros() and _tiles_granted()


@functools.lru_cache(maxsize=None)
def _tiles_granted() -> bool:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    # arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): granted once, for the whole process
    return ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18) == 0


@functools.lru_cache(maxsize=None)
def _version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> str:
    # -march=native means the host ISA is part of what the binary assumes
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.split(":", 1)[1].strip().encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint() -> dict:
    """What a build depends on; "cxx" is None where no compiler is usable (the target then takes it
    from the kernel cache's entries: compiler/target/cache_only.py)."""
    cxx = None if missing() else find_compiler()
    arch = march_flags()
    return {"cxx": _version(cxx) if cxx else None, "flags": BASE_FLAGS + arch, "machine": platform.machine(),
            "isa": _cpu_flags() if "native" in arch[0] else arch[0]}


# GCC >= 12 on x86: copies the compiler makes itself (an inlined memcpy, merged stores) no wider
# than the 256-bit vectors the loops use. A 512-bit load of two 256-bit stores still on their way to
# the cache does not forward but waits for them: a loop's carried tile, stored by a loop nest and
# copied into its slot by memcpy, did so every iteration (a tenth of a sample kernel's time at one
# such load). A function of the compiler, which the fingerprint's "cxx" names.
NARROW_MOVES = ("-mmove-max=256", "-mstore-max=256")


@functools.lru_cache(maxsize=None)
def _accepts(cxx: str, flags: tuple[str, ...]) -> bool:
    res = subprocess.run([cxx, *flags, "-fsyntax-only", "-x", "c++", os.devnull], capture_output=True, check=False)
    return res.returncode == 0


def move_flags(cxx: str, arch: list[str], wide_vectors: bool) -> list[str]:
    """NARROW_MOVES where the loops vectorise 256 bits wide (march_flags) and the compiler takes them."""
    narrow = "-mprefer-vector-width=256" in arch and not wide_vectors
    return list(NARROW_MOVES) if narrow and _accepts(cxx, NARROW_MOVES) else []


def build(source_path: str, out_path: str, wide_vectors: bool = False) -> None:
    """Compiles a kernel; `wide_vectors`: its loops use the host's widest vectors (the template's
    TILEJIT_WIDE_VECTORS), so its copies may be as wide."""
    why = missing()
    if why:
        raise TargetError(f"the cpu target needs a C++ compiler to build: {why}")
    cxx = find_compiler()
    arch = march_flags()
    cmd = [cxx, *BASE_FLAGS, *arch, *move_flags(cxx, arch, wide_vectors), f"-I{HEADER_DIR}", source_path, "-o", out_path]
    with compiler_tmpdir(os.path.dirname(os.path.abspath(out_path))) as env:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        chosen = os.environ.get("TILEJIT_CPU_ARCH", "").strip()
        hint = (f"\nTILEJIT_CPU_ARCH={chosen} sets {arch[0]}: the compiler may not know that name "
                "(unset it for -march=native)") if chosen and ("march" in res.stderr or "mcpu" in res.stderr) else ""
        raise TargetError(f"C++ compilation failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}{hint}")
