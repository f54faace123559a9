"""The `cpu` target: host C++ from the C-family lowering, built by the system compiler with
OpenMP across programs, launched through the compiled launch path (ctypes where it is missing).

TILEJIT_CPU_BOUNDS_CHECK=1 (read when the target is first used) renders every load and store
with a check against the view of the tensor it came from (bounds.py): an out-of-bounds access becomes a
KernelBoundsError naming the kernel, the argument, the offset and the extent, instead of a crash.
It is part of the fingerprint, so checked and unchecked builds are separate cache entries.

Without a C++ compiler the target still runs the kernels already in the kernel cache (a
deployment image with an imported cache): the compiler's version in its fingerprint is then the
one recorded by those entries (compiler/target/cache_only.py), and only a build fails."""
from __future__ import annotations

import functools
import os

from compiler.errors import TargetError
from compiler.ir import Function
from compiler.numerics import policy_of
from compiler.target import Caps, Requirement, Target, TargetPlugin, command_version, requirements
from compiler.target.cache_only import adopt_fingerprint
from compiler.version import package_source_hash

from . import toolchain
from .launcher import load_launcher
from .renderer import MAX_STACK_BYTES, CPURenderer

_HERE = os.path.dirname(__file__)


class CPUTarget(Target):
    name = "cpu"
    device_type = "cpu"
    source_suffix = ".cpp"
    @functools.cached_property
    def caps(self) -> Caps:
        # a program's tiles live on an OpenMP worker's stack; program ids are int32. BLOCK_M changes
        # no bit here: a dot is one ascending-k fma chain per output element whatever the row block
        # (tests/test_batch_invariance.py proves it for every BLOCK_M, both policies); a bf16 dot on
        # AMX tiles chains across K tiles of 32 k (tilejit_cpu.h), many times faster than fp32
        amx = toolchain.amx_bf16_dot()
        return Caps(local_memory_bytes=MAX_STACK_BYTES, measurable=True, bit_neutral=frozenset({"BLOCK_M"}),
                    dot_chains_across_tiles=True, dot_k_grain=32 if amx else 1,
                    narrow_dots=frozenset({"bfloat16"}) if amx else frozenset())

    # the fast policy uses the strict exp/log sequences too: they vectorise, the C library's do not
    fast_software_math = True

    def __init__(self, bounds_check: bool | None = None):
        if bounds_check is None:
            bounds_check = os.environ.get("TILEJIT_CPU_BOUNDS_CHECK", "").strip().lower() in ("1", "true", "yes", "on")
        self.bounds_check = bounds_check
        self.renderer = CPURenderer(bounds_check)
        self._fingerprint = None

    @property
    def launch_key(self) -> str:
        # a checked and an unchecked instance must not share compiled kernels
        return f"{self.name}+bounds_check" if self.bounds_check else self.name

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            fp = {"target": "cpu", **toolchain.fingerprint(),
                  "source": package_source_hash(_HERE),
                  "cfamily": package_source_hash(os.path.join(_HERE, "..", "cfamily"))}
            if self.bounds_check:
                fp["bounds_check"] = True
            if fp["cxx"] is None:   # no compiler here: the cache's entries say which one built them
                return adopt_fingerprint(fp, self.unknown_here())
            self._fingerprint = fp
        return self._fingerprint

    def unknown_here(self) -> tuple[str, ...]:
        return ("cxx",) if toolchain.missing() else ()

    def cannot_build(self) -> str | None:
        return requirements.build_problem("cpu", TARGET)

    def render(self, fn: Function) -> str:
        return self.renderer.render(fn, policy_of(fn))

    def build(self, fn: Function, source: str, out_dir) -> dict:
        src = os.path.join(out_dir, "kernel.cpp")
        with open(src, "w") as f:
            f.write(source)
        toolchain.build(src, os.path.join(out_dir, "kernel.so"), wide_vectors="#define TILEJIT_WIDE_VECTORS" in source)
        return {"kernel": fn.name, "entry": "tj_launch", "target": "cpu", "fingerprint": self.fingerprint(),
                "params": [(p.name, p.type.dtype.name) for p in fn.params]}

    def load(self, fn: Function, entry, arg_indices: list[int], cache):
        """A launcher taking the kernel's full argument tuple; `arg_indices` picks the runtime ones."""
        return load_launcher(str(entry.file("kernel.so")), fn, arg_indices, self.caps, self.bounds_check)


class CPUPlugin(TargetPlugin):
    """Entry-point object for `tilejit.targets`: metadata plus a factory."""

    name = "cpu"
    version = "0.1.0"
    device_kinds = ("cpu",)
    capabilities = ("run", "strict", "fast")
    # C++17, OpenMP and -ffp-contract=off: g++ 9 / clang 9 are the oldest releases tested for all three
    # needed for builds only: without it, the kernels already in the cache still run
    requirements = (Requirement("C++ compiler", "9.0", lambda: command_version(toolchain.find_compiler()),
                                hint="install g++ >= 9 or clang++ >= 9, or point CXX at one", needed_for="build"),)
    # a string so that importing the compiler does not import the runtime
    device_backend = "targets.cpu.device:CPUDevice"

    def create(self, variant: str | None) -> CPUTarget:
        if variant:
            raise TargetError(f"the cpu target has no variant '{variant}'; use 'cpu'")
        return CPUTarget()


TARGET = CPUPlugin()
