"""The `gpu` target: Tile IR -> Triton source (one `@triton.jit` function per kernel) -> Triton.

Target names:
- `gpu`            the CUDA/ROCm device torch sees; the arch comes from the device. Kernels are
  built into the tilejit cache and launched from it (the stored cubin/hsaco is what runs);
- `gpu:sm_80`, `gpu:sm_90` (any `sm_NN`), `gpu:gfx942` (any `gfxNNN`): compile-only builds for that
  arch, no device needed; artifacts (PTX/cubin or AMDGCN/hsaco, IRs, metadata json) are stored in
  the tilejit cache and the launcher refuses to run. `gpu` on a device of that arch has the same
  fingerprint, so these entries are its cache hits (a cache pre-built without a GPU);
- `gpu:interpret`  Triton's interpreter on CPU tensors (numerics checks without a GPU).
A `+tf32` suffix (`gpu+tf32` is spelled `gpu:+tf32`, or `gpu:sm_90+tf32`) lets fast-policy fp32
dots use tf32; the default is IEEE fp32.
"""
from __future__ import annotations

import os
import re

from compiler.cache import stable_hash
from compiler.errors import KernelArgumentError, TargetError
from compiler.ir import Function
from compiler.numerics import policy_of
from compiler.target import Caps, Requirement, Target, TargetPlugin
from compiler.version import package_source_hash

from . import toolchain
from .assume import Assumptions
from .launcher import CompileOnlyLauncher, DeviceBinary, DeviceLauncher, InterpretLauncher
from .renderer import TritonRenderer

_HERE = os.path.dirname(__file__)
DEFAULT_NUM_WARPS = 4
WARP_SIZES = {"cuda": 32, "hip": 64}
# CUDA's grid limits (x, y, z); ROCm's are at least as large
MAX_GRID = (2 ** 31 - 1, 65535, 65535)
# launch options (compiler/launch_options.py) forwarded to triton.compile, per backend; the
# interpreter honours none of them
_COMMON_OPTIONS = {"num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "debug", "launch_cooperative_grid"}
LAUNCH_OPTIONS = {"cuda": frozenset(_COMMON_OPTIONS | {"maxnreg", "launch_pdl"}),
                  "hip": frozenset(_COMMON_OPTIONS | {"waves_per_eu", "matrix_instr_nonkdim", "kpack",
                                                      "schedule_hint"})}


class GPUTarget(Target):
    source_suffix = ".py"
    # fast policy: Triton's native math and libdevice; the interpreter has no libdevice, so there
    # the ops without a tl.* spelling use compiler/strict.py's sequences
    fast_software_math = False
    INTERPRETER_SOFTWARE_MATH = frozenset({"tanh", "log1p", "expm1", "pow", "rint"})
    # Triton's tl.max / tl.min combine with maxnum / minnum (its interpreter: nanmax / nanmin);
    # the strict policy's explicit trees compare with `>` and need NaN-free operands
    nan_ignoring_reductions = ("fast",)

    def __init__(self, mode: str, backend: str | None, arch: str | None, tf32: bool = False,
                 num_warps: int = DEFAULT_NUM_WARPS, name: str = "gpu"):
        self.mode = mode              # "device" | "compile" | "interpret"
        self.backend = backend        # "cuda" | "hip" | None (interpret)
        self.arch = arch              # "sm_90", "gfx942", None
        self.tf32 = tf32
        self.num_warps = num_warps
        self.name = name
        # torch calls ROCm devices "cuda" too; compile-only targets take host tensors as dtype carriers
        # (nothing runs), so library calls under compiler.compile_only() pre-build their kernels
        self.device_type = "cuda" if mode == "device" else "cpu"
        self.renderer = TritonRenderer(tf32=tf32, interpret=mode == "interpret")
        if mode == "interpret":
            self.fast_software_math = self.INTERPRETER_SOFTWARE_MATH
        self.launch_options = LAUNCH_OPTIONS.get(backend, frozenset()) if mode != "interpret" else frozenset()
        # a program is num_warps warps of threads; tiles are powers of two; timings mean something
        # only on a device
        self.caps = Caps(lanes_per_program=num_warps * WARP_SIZES.get(backend, 32), pow2_tiles=True,
                         max_grid=MAX_GRID, measurable=mode == "device", narrow_dots=frozenset({"float16", "bfloat16"}),
                         dot_min_rows=16)
        self._fingerprint = None

    def __repr__(self) -> str:
        return f"<gpu target {self.name} mode={self.mode} arch={self.arch}>"

    def fingerprint(self) -> dict:
        # "device" and "compile" share one fingerprint: for the same arch they build the same
        # binary, so an entry built by `gpu:sm_90` without a GPU is a hit for `gpu` on an sm_90
        # device. The name (`gpu` vs `gpu:sm_90`) is deliberately not part of it.
        if self._fingerprint is None:
            self._fingerprint = {"target": "gpu", "mode": "interpret" if self.mode == "interpret" else "binary",
                                 "backend": self.backend, "arch": self.arch, "triton": toolchain.triton_version(),
                                 "options": {"num_warps": self.num_warps, "tf32": self.tf32,
                                             "pointer_divisibility": 16},
                                 "source": package_source_hash(_HERE)}
        return self._fingerprint

    def check_tensor(self, kernel_name, arg_name, t) -> None:
        # compile-only: tensors only describe dtypes (there is no device to put them on); the
        # launcher refuses to run anyway
        if self.mode != "compile" and t.device.type != self.device_type:
            raise KernelArgumentError(
                f"kernel '{kernel_name}': argument '{arg_name}' is on device '{t.device}', but target "
                f"'{self.name}' runs on '{self.device_type}' tensors. Move it with .to('{self.device_type}') "
                "or choose the matching target (TILEJIT_TARGET / use_target).")

    def render(self, fn: Function) -> str:
        return self.renderer.render(fn, policy_of(fn))

    def build(self, fn: Function, source: str, out_dir, unaligned=()) -> dict:
        src = os.path.join(str(out_dir), "kernel.py")
        with open(src, "w") as f:
            f.write(source)
        policy = policy_of(fn)
        meta = {"kernel": fn.name, "target": self.name, "fingerprint": self.fingerprint(),
                "backend": self.backend, "arch": self.arch,
                "policy": policy, "triton": toolchain.triton_version(),
                "params": [(p.name, p.type.dtype.name) for p in fn.params], "artifacts": ["kernel.py"]}
        if self.mode != "interpret":
            options = fn.specialization.get("options", {})
            info = toolchain.compile_kernel(fn, src, str(out_dir), self.backend, self.arch, policy,
                                            options.get("num_warps", self.num_warps), Assumptions(fn, unaligned),
                                            options)
            meta.update(info)
            meta["artifacts"] = ["kernel.py"] + info["artifacts"]
        return meta

    def load(self, fn: Function, entry, arg_indices: list[int], cache):
        if self.mode == "compile":
            return CompileOnlyLauncher(self.name, fn.name, str(entry.path), entry.meta.get("artifacts", []))
        if self.mode == "interpret":
            jit_fn = getattr(toolchain.load_module(str(entry.file("kernel.py"))), fn.name)
            return InterpretLauncher(jit_fn, fn.name, arg_indices, self.caps, [p.name for p in fn.params])
        return DeviceLauncher(fn.name, arg_indices, self._binary(fn, entry, ()),
                              lambda unaligned: self._binary(fn, self._unaligned_entry(fn, entry, unaligned, cache),
                                                             unaligned), self.caps, [p.name for p in fn.params])

    def _binary(self, fn: Function, entry, unaligned) -> DeviceBinary:
        """A cache entry's kernel, checked against this target, read as a Triton CompiledKernel."""
        assume = Assumptions(fn, unaligned)
        meta = entry.meta
        if (meta.get("backend"), meta.get("arch")) != (self.backend, self.arch) \
                or meta.get("signature") != assume.signature \
                or tuple(meta.get("unaligned_pointers", ())) != assume.unaligned:
            raise TargetError(f"kernel '{fn.name}': cache entry {entry.path} was built for "
                              f"{meta.get('backend')}:{meta.get('arch')} with signature {meta.get('signature')}, "
                              f"not for {self.backend}:{self.arch} with {assume.signature}; remove it "
                              "(`python -m compiler.cache verify` / `prune`) and rebuild")
        return DeviceBinary(assume, toolchain.load_compiled(str(entry.path), fn.name, meta["artifacts"], assume,
                                                            meta.get("triton_hash", "")))

    def _unaligned_entry(self, fn: Function, entry, unaligned, cache):
        """The entry, in the cache the aligned one came from, of the variant compiled without the
        alignment assumption for the named pointers (built on first need; keyed by the aligned
        entry's key and those names)."""
        key = stable_hash({"gpu_unaligned_variant_of": entry.key, "unaligned_pointers": sorted(unaligned)})
        source = entry.file("kernel.py").read_text()
        return cache.get_or_build(key, lambda d: self.build(fn, source, d, unaligned))


_ARCH_RE = re.compile(r"^(sm_\d+a?|gfx[0-9a-f]+)$")


def _device_arch():
    """(backend, arch) of torch's current CUDA/ROCm device, or None."""
    try:
        import torch  # noqa: PLC0415
        if not torch.cuda.is_available():
            return None
        if getattr(torch.version, "hip", None):
            return "hip", torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName.split(":")[0]
        major, minor = torch.cuda.get_device_capability()
        return "cuda", f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001
        return None


class GPUPlugin(TargetPlugin):
    """Entry-point object for `tilejit.targets`: metadata plus a factory."""

    name = "gpu"
    version = "0.1.0"
    device_kinds = ("cuda", "hip")
    capabilities = ("compile", "interpret", "run", "strict", "fast")
    # Triton 3.0 is the first release with the ASTSource/GPUTarget compile API used here
    requirements = (Requirement("triton", "3.0", lambda: toolchain.triton_version(),
                                hint="pip install 'triton>=3.0'"),)
    device_backend = "targets.gpu.device:CUDADevice"

    def available(self) -> tuple[bool, str]:
        if toolchain.triton_version() is None:
            return False, "triton is not installed (pip install triton)"
        return True, ""

    def limited_here(self) -> str:
        if _device_arch() is None:
            return ("compile-only and interpreter, no device: gpu:sm_80 / gpu:sm_90 / gpu:gfx942 compile, "
                    "gpu:interpret runs, `gpu` launches are refused")
        return ""

    def status(self) -> list[str]:
        dev = _device_arch()
        if dev is not None:
            return [f"device: {dev[0]} {dev[1]} (`gpu` launches on it)"]
        try:
            import torch  # noqa: PLC0415
            gpu_build = torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None
            build = f"torch {torch.__version__}, " + ("built with GPU support" if gpu_build else "a CPU build")
        except Exception:  # noqa: BLE001
            build = "torch not importable"
        return [f"device: none visible to torch ({build})"]

    def create(self, variant: str | None) -> GPUTarget:
        spec = variant or ""
        tf32 = spec.endswith("+tf32")
        spec = spec.removesuffix("+tf32")
        full = "gpu" + (f":{variant}" if variant else "")
        if spec == "interpret":
            return GPUTarget("interpret", None, None, tf32, name=full)
        if spec == "":
            dev = _device_arch()
            if dev is None:
                raise TargetError("target 'gpu' needs a CUDA or ROCm device visible to torch, and there is none "
                                  "here. Use 'gpu:sm_90' / 'gpu:gfx942' to compile without a device, or "
                                  "'gpu:interpret' to run through Triton's interpreter on CPU tensors")
            return GPUTarget("device", dev[0], dev[1], tf32, name=full)
        if not _ARCH_RE.match(spec):
            raise TargetError(f"the gpu target has no variant '{variant}'; use 'gpu', 'gpu:interpret', "
                              "'gpu:sm_80', 'gpu:sm_90' or 'gpu:gfx942' (optionally with '+tf32')")
        backend = "cuda" if spec.startswith("sm_") else "hip"
        # Triton builds sm_90a code for capability 90 either way: one arch, one fingerprint
        return GPUTarget("compile", backend, spec.removesuffix("a") if backend == "cuda" else spec, tf32, name=full)


TARGET = GPUPlugin()
