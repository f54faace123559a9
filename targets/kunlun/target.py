"""The kunlun Target: `.xpu` from the codegen package, built by the build package (XTDK, or the
host emulation), launched by runtime/launcher.py, tuned offline by the tune package."""
from __future__ import annotations

import collections
import os

from compiler.ir import Function
from compiler.numerics import policy_of
from compiler.target import INT32_MAX, Caps, Target, requirements
from compiler.target.cache_only import adopt_fingerprint
from compiler.version import package_source_hash

from .arch import get_arch
from .build import toolchain
from .codegen.renderer import KunlunRenderer
from .plan.scratch import spill_allowed
from .runtime import sites
from .runtime.launcher import KunlunLauncher, check_tensor
from .tune import cost_model

_HERE = os.path.dirname(__file__)


class KunlunTarget(Target):
    device_type = "cpu"          # host emulation: tensors live on the host
    source_suffix = ".xpu"
    fast_software_math = False   # fast policy: the target's own math library
    # Kunlun Triton's options with a meaning here (compiler/launch_options.py, codegen/lowering.py)
    launch_options = frozenset({"isCloseVectorization", "isCloseMemoryAsync"})

    def __init__(self, arch: str | None = None):
        self.arch = get_arch(arch)
        self.name = f"kunlun:{self.arch.name}"
        # 32-bit program ids and indices; tiles in the LM budget; emulated timings mean nothing. A
        # dot is one ascending-k fma chain per output element (scalar fmaf or svmac lanes), also
        # when the memory plan cuts it, so row blocks and dot tiles change no bit
        # (tests/test_batch_invariance.py proves it in both policies)
        self.caps = Caps(local_memory_bytes=self.arch.lm_budget, index_bits=32, measurable=False,
                         max_programs=INT32_MAX, bit_neutral=frozenset({"BLOCK_M"}), dot_chains_across_tiles=True)
        self.renderer = KunlunRenderer(self.arch)
        self._fingerprint = None
        # source -> memory plan, for what was rendered lately (render_only probes read it back)
        self._rendered: collections.OrderedDict[str, object] = collections.OrderedDict()

    def fingerprint(self) -> dict:
        # TILEJIT_KUNLUN_SPILL=0 refuses what a plan would spill: a cached kernel must not answer for it
        spill = spill_allowed()
        if self._fingerprint is None:
            fp = {"target": self.name, **toolchain.fingerprint(self.arch),
                  "source": package_source_hash(_HERE),
                  "cfamily": package_source_hash(os.path.join(_HERE, "..", "cfamily"))}
            if self.unknown_here():   # no host compiler: the cache's entries say which one built them
                return adopt_fingerprint({**fp, "spill": spill}, self.unknown_here())
            self._fingerprint = fp
        return {**self._fingerprint, "spill": spill}

    def unknown_here(self) -> tuple[str, ...]:
        return ("cxx",) if toolchain.mode() == "emulation" and toolchain.cpu_toolchain.missing() else ()

    def cannot_build(self) -> str | None:
        if toolchain.mode() == "xtdk":
            return None
        from . import TARGET  # noqa: PLC0415 - the plugin module imports this one
        return requirements.build_problem("kunlun", TARGET)

    def estimate(self, spec, config: dict, shape: dict, policy: str) -> float:
        """Estimated seconds of a library op call under `policy` (tune/cost_model.py); the autotuner
        ranks by it and labels every decision "estimated". A config over the LM budget raises
        LMBudgetError."""
        return cost_model.estimate(self, spec, config, shape, policy)

    def check_tensor(self, kernel_name, arg_name, t) -> None:
        check_tensor(kernel_name, arg_name, t)

    def render(self, fn: Function) -> str:
        src, plan = self.renderer.render(fn, policy_of(fn))
        self._rendered[src] = plan
        while len(self._rendered) > 256:
            self._rendered.popitem(last=False)
        return src

    def memory_plan(self, fn: Function):
        """The memory plan of one program of `fn` (raises LMBudgetError when none fits)."""
        return self.renderer.render(fn, policy_of(fn))[1]

    def plan_of(self, source: str):
        """The memory plan of a source this target rendered lately (render_only probes read it back)."""
        return self._rendered[source]

    def footprint(self, source: str) -> int:
        """Bytes of the LM arena of a program this target rendered lately (from its memory plan)."""
        return self._rendered[source].lm_bytes

    def inspect_extras(self, fn: Function) -> dict[str, str]:
        """For `python -m compiler.inspect`: the memory plan of one program, buffer by buffer."""
        plan = self.memory_plan(fn)
        a = self.arch
        lines = [plan.listing(),
                 f"total {plan.lm_bytes} bytes of LM arena + {a.lm_stack_reserve} stack reserve = "
                 f"{plan.lm_bytes + a.lm_stack_reserve} of {a.lm_bytes_per_core} bytes per core ({a.name})"]
        return {f"LM footprint ({self.name})": "\n".join(lines)}

    def build(self, fn: Function, source: str, out_dir) -> dict:
        src = os.path.join(out_dir, "kernel.xpu")
        with open(src, "w") as f:
            f.write(source)
        mode = toolchain.build(self.arch, src, str(out_dir))
        plan = self._rendered.get(source) or self.memory_plan(fn)
        return {"kernel": fn.name, "entry": "tj_launch", "target": self.name, "mode": mode,
                "fingerprint": self.fingerprint(), "params": [(p.name, p.type.dtype.name) for p in fn.params],
                "scratch_bytes": plan.scratch_slot * plan.cores}

    def load(self, fn: Function, entry, arg_indices: list[int], cache) -> KunlunLauncher:
        return KunlunLauncher(str(entry.file("kernel.so")), fn.name, [p.type.dtype for p in fn.params],
                              [p.name for p in fn.params], arg_indices, self.caps,
                              emulation=self.fingerprint()["mode"] == "emulation", target_name=self.name,
                              describe_site=lambda site: sites.describe(self, fn, site),
                              scratch_bytes=entry.meta.get("scratch_bytes", 0))
