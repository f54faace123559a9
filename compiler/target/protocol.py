"""The target interface, in one place: what a target plugin provides and what the compiler, the
autotuner, the library kernels and the runtime may ask of it.

A target package (targets/cpu, targets/kunlun, a third-party one) exposes a `TargetPlugin`
through the `tilejit.targets` entry-point group; the plugin's `create(variant)` makes `Target`
objects. Both are subclasses of the classes below, which supply every optional member with its
default, so no caller ever probes a target with `getattr`:

Target (one compiled-for machine, e.g. `kunlun:xpu2`)
    name, device_type, source_suffix, caps     identity, the torch device type of its tensors, and
                                                its capabilities as data (`Caps`)
    fast_software_math                          numerics: the fast policy also uses the software math
                                                (True: every sequence; a set of op names: those only)
    nan_ignoring_reductions                     policies whose max/min reductions ignore NaN natively
    fingerprint() -> dict                       what its binaries depend on (part of every cache key)
    unknown_here() -> tuple                     fingerprint fields this machine cannot determine (a
                                                toolchain that is not installed; cache_only.py)
    cannot_build() -> str | None                why this machine cannot build its kernels (kernels
                                                already in the cache still load), or None
    render(fn) -> str                           Tile IR (after passes) -> source text
    build(fn, source, out_dir) -> dict          source -> files in out_dir; returns the entry's meta
    load(fn, entry, arg_indices, cache)         a cache entry -> a launcher `launcher(grid, args)`;
                                                `cache` is the KernelCache the entry came from
    check_tensor(kernel, arg, tensor)           refuses tensors it cannot take (device, dtype, size)
    launch_options                              the launch options (num_warps, ...) its build honours;
                                                they reach it as fn.specialization["options"] and are
                                                part of the cache key; others have no effect here
    estimate(spec, config, shape, policy)       optional cost model: seconds, or None (no model)
    inspect_extras(fn) -> {title: text}         optional sections for `python -m compiler.inspect`

TargetPlugin (one target family, e.g. `kunlun`)
    name, version, device_kinds, capabilities   metadata shown by `python -m targets`
    requirements                                `Requirement`s checked before the first use
    device_backend                              a runtime.device.Device subclass or "module:attr"
    collective_backends                         {name: "module"} of communicator backends it adds
    available() -> (ok, why)                    conditions that are not versions (a device present)
    status() -> [lines]                         what it found on this machine, for `targets -v`
    create(variant) -> Target                   the factory
"""
from __future__ import annotations

import dataclasses

INT32_MAX = 2 ** 31 - 1


@dataclasses.dataclass(frozen=True)
class Caps:
    """A target's capabilities, as data. Library ops pick default configs and candidate spaces
    from them (`tile_class`), never from the target's name; launchers check grids against them.

    local_memory_bytes  bytes of tile buffers one program may hold (None: no fixed limit)
    lanes_per_program   hardware threads that cooperate on one program (a GPU's warps x 32; 1 on
                        targets where a program is one thread with SIMD)
    pow2_tiles          tile dimensions must be powers of two (Triton)
    max_grid            the largest program count per grid axis
    max_programs        the largest number of programs in one launch
    index_bits          width of the target's integer index arithmetic
    measurable          timings taken on this machine are this target's real speed (the autotuner
                        measures only then; otherwise it asks `estimate`)
    bit_neutral         config parameters that never change a result bit on this target, beyond
                        those an op declares itself (see docs/numerics.md, batch invariance)
    dot_chains_across_tiles  `tl.dot(a, b, acc)` is one ascending-k fma chain per output element
                        that continues `acc`: how K is cut into tiles, or N into programs, never
                        changes a bit (an op's default may then pick its `dot_tiles` by the batch)
    dot_k_grain         where the dot chains across tiles, it does so bit for bit only for K tiles
                        that are multiples of this (the cpu target's bf16 dot on AMX adds 32 k per
                        tile instruction, in an order of its own): ops launch their dot's K tile
                        (`OpSpec.dot_k`) at least this large
    narrow_dots         the 16-bit dtypes ("float16", "bfloat16") whose dots run on matrix units many
                        times faster than fp32 ones (GPU tensor cores: both; a CPU with AMX-BF16:
                        bfloat16): in the fast policy, library kernels then keep such operands
                        narrow, and attention rounds its probabilities to the value dtype for the
                        P.V dot, as FlashAttention does (docs/numerics.md)
    dot_min_rows        the fewest rows a dot runs on the matrix unit (Triton's tl.dot: 16; the gpu
                        target renders a shorter one as an fma chain): ops' bit-neutral row blocks
                        are not clamped below it (`OpSpec.dot_rows`)
    """

    local_memory_bytes: int | None = None
    lanes_per_program: int = 1
    pow2_tiles: bool = False
    max_grid: tuple[int, int, int] = (INT32_MAX, INT32_MAX, INT32_MAX)
    max_programs: int = 2 ** 63 - 1
    index_bits: int = 64
    measurable: bool = True
    bit_neutral: frozenset = frozenset()
    dot_chains_across_tiles: bool = False
    dot_k_grain: int = 1
    narrow_dots: frozenset = frozenset()
    dot_min_rows: int = 1

    @property
    def tile_class(self) -> str:
        """How a program holds its tiles: "scratchpad" (a small software-managed local memory, at
        most 64 KiB a program: Kunlun's LM), "simt" (spread over many threads: GPUs), or "cache"
        (one thread's stack, served by a cache hierarchy: CPUs)."""
        if self.local_memory_bytes is not None and self.local_memory_bytes <= 64 * 1024:
            return "scratchpad"
        if self.lanes_per_program > 1:
            return "simt"
        return "cache"


class Target:
    """One compiled-for machine. Subclasses set `name` and implement fingerprint/render/build/load."""

    name = "unnamed"
    device_type = "cpu"
    source_suffix = ".txt"
    caps = Caps()
    fast_software_math = False
    # the policies in which its own max/min reductions already ignore NaN (compiler/value_rules.py);
    # elsewhere the compiler rewrites them so that the reductions never see one
    nan_ignoring_reductions: tuple = ()
    launch_options: frozenset = frozenset()   # see compiler/launch_options.py

    @property
    def launch_key(self) -> str:
        """What tells apart the kernels this target compiles in one process (the first item of a
        launch's key): its name, plus any setting of the instance that changes the code."""
        return self.name

    def fingerprint(self) -> dict:
        raise NotImplementedError(f"target {self.name!r} does not implement fingerprint()")

    def unknown_here(self) -> tuple[str, ...]:
        """Fingerprint fields this machine cannot determine (its toolchain is not installed): the
        fingerprint takes them from the kernel cache's entries (compiler/target/cache_only.py),
        and an archive's entries are not refused for differing there."""
        return ()

    def cannot_build(self) -> str | None:
        """Why kernels cannot be built for this target here (a toolchain missing or too old), or
        None. Kernels already in the kernel cache load and run either way."""
        return None

    def render(self, fn) -> str:
        raise NotImplementedError(f"target {self.name!r} does not implement render()")

    def build(self, fn, source: str, out_dir) -> dict:
        raise NotImplementedError(f"target {self.name!r} does not implement build()")

    def load(self, fn, entry, arg_indices: list[int], cache):
        raise NotImplementedError(f"target {self.name!r} does not implement load()")

    def check_tensor(self, kernel_name: str, arg_name: str, t) -> None:
        """Refuses a tensor this target cannot take; the default checks the device type."""
        if t.device.type != self.device_type:
            from ..errors import KernelArgumentError  # noqa: PLC0415
            raise KernelArgumentError(
                f"kernel '{kernel_name}': argument '{arg_name}' is on device '{t.device}', but target "
                f"'{self.name}' runs on '{self.device_type}' tensors. Move it with .to('{self.device_type}') "
                "or choose the matching target (TILEJIT_TARGET / use_target).")

    def estimate(self, spec, config: dict, shape: dict, policy: str) -> float | None:
        """Estimated seconds of one call of library op `spec` with `config` on `shape` under numerics
        `policy` (the one its kernels are built with, not the ambient one), or None when the target
        has no cost model. Raise (e.g. a CompilationError) for a config that cannot run."""
        return None

    @property
    def has_cost_model(self) -> bool:
        return type(self).estimate is not Target.estimate

    def inspect_extras(self, fn) -> dict[str, str]:
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class TargetPlugin:
    """One target family, the object an entry point of `tilejit.targets` names."""

    name = "unnamed"
    version = "unknown"
    device_kinds: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    requirements: tuple = ()
    device_backend = None
    collective_backends: dict[str, str] = {}

    def available(self) -> tuple[bool, str]:
        return True, ""

    def status(self) -> list[str]:
        return []

    def limited_here(self) -> str:
        """When the target is available but only in part on this machine, what works and what
        does not, in a few words (`python -m targets` prints it next to "available"); "" otherwise."""
        return ""

    def create(self, variant: str | None) -> Target:
        raise NotImplementedError(f"target plugin {self.name!r} does not implement create(variant)")
