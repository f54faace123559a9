"""The `kunlun` target (`kunlun:xpu2`, `kunlun:xpu3`; `kunlun` alone = xpu3): Kunlun XPU C++
(`.xpu`) from the C-family lowering, built with XTDK when present, otherwise the same source
built for the host against xpu_emulation.h. See docs/kunlun.md for what is verified here."""
from __future__ import annotations

import os

from compiler.ir import Function
from compiler.plugins import Requirement, command_version
from compiler.version import package_source_hash

from . import cost_model, sdk, toolchain
from .arch import ARCHS, DEFAULT_ARCH, get_arch
from .launcher import KunlunLauncher, check_tensor
from .renderer import KunlunRenderer, LMBudgetError

_HERE = os.path.dirname(__file__)

# library-kernel candidates at LM scale (a core holds ~7 KB of tiles)
CONFIG_SPACE = {
    "matmul": [{"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk} for bm in (4, 8, 16) for bn in (16, 32) for bk in (16, 32)],
    **{op: [{"BLOCK": b} for b in (32, 64, 128, 256)] for op in ("layer_norm", "rms_norm", "add_rms_norm")},
    "attention": [{"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_DK": dk, "BLOCK_DO": 32}
                  for bm in (1, 2, 4, 8) for bn in (8, 16, 32) for dk in (16, 32)],
}

__all__ = ["ARCHS", "KunlunTarget", "KunlunPlugin", "LMBudgetError", "TARGET"]


class KunlunTarget:
    device_type = "cpu"          # host emulation: tensors live on the host
    source_suffix = ".xpu"
    fast_software_math = False   # fast policy: the target's own math library

    def __init__(self, arch: str | None = None):
        self.arch = get_arch(arch)
        self.name = f"kunlun:{self.arch.name}"
        self.renderer = KunlunRenderer(self.arch)
        self._fingerprint = None
        self.last_lm_bytes = None

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = {"target": self.name, **toolchain.fingerprint(self.arch),
                                 "source": package_source_hash(_HERE),
                                 "cfamily": package_source_hash(os.path.join(_HERE, "..", "cfamily"))}
        return self._fingerprint

    def estimate(self, op: str, config: dict, shape: dict) -> float:
        """Estimated seconds of a library kernel call (see cost_model.py); the autotuner ranks by it
        and labels every decision "estimated". A config over the LM budget raises LMBudgetError."""
        from compiler.numerics import current_policy  # noqa: PLC0415
        return cost_model.estimate(self, op, config, shape, current_policy())

    def config_space(self, op: str, default: list[dict]) -> list[dict]:
        """The autotuner's candidates on this target: tiles sized for ~7 KB of LM per core rather
        than the shared space (whose smallest attention tiles already overflow it)."""
        return [dict(c) for c in CONFIG_SPACE.get(op, default)]

    def check_tensor(self, kernel_name, arg_name, t) -> None:
        check_tensor(kernel_name, arg_name, t)

    def lm_footprint(self, fn: Function) -> int:
        """Bytes of LM tile buffers one program of `fn` declares (raises LMBudgetError over budget)."""
        return self.renderer.render(fn, fn.specialization.get("numerics", "fast"))[1]

    def inspect_extras(self, fn: Function) -> dict[str, str]:
        """For `python -m compiler.inspect`: the LM footprint of one program, buffer by buffer."""
        source, total = self.renderer.render(fn, fn.specialization.get("numerics", "fast"))
        a = self.arch
        lines = [f"__local__ {n}: {b} bytes" for n, b in self.renderer.lm_buffers(source)]
        lines.append(f"total {total} bytes of tile buffers + {a.lm_stack_reserve} stack reserve = "
                     f"{total + a.lm_stack_reserve} of {a.lm_bytes_per_core} bytes per core ({a.name})")
        return {f"LM footprint ({self.name})": "\n".join(lines)}

    def render(self, fn: Function) -> str:
        src, self.last_lm_bytes = self.renderer.render(fn, fn.specialization.get("numerics", "fast"))
        return src

    def build(self, fn: Function, source: str, out_dir) -> dict:
        src = os.path.join(out_dir, "kernel.xpu")
        with open(src, "w") as f:
            f.write(source)
        mode = toolchain.build(self.arch, src, str(out_dir))
        return {"kernel": fn.name, "entry": "tj_launch", "target": self.name, "mode": mode,
                "fingerprint": self.fingerprint(), "params": [(p.name, p.type.dtype.name) for p in fn.params]}

    def load(self, fn: Function, entry, arg_indices: list[int]) -> KunlunLauncher:
        return KunlunLauncher(str(entry.file("kernel.so")), fn.name, [p.type.dtype for p in fn.params],
                              [p.name for p in fn.params], arg_indices,
                              emulation=self.fingerprint()["mode"] == "emulation")


class KunlunPlugin:
    """Entry-point object for `tilejit.targets`."""

    name = "kunlun"
    version = "0.1.0"
    device_kinds = ("xpu2", "xpu3")
    capabilities = ("run-emulated", "strict", "fast")
    requirements = (Requirement("C++ compiler (host emulation)", "9.0",
                                lambda: command_version(toolchain.cpu_toolchain.find_compiler()),
                                hint="install g++ >= 9, or XTDK (set XTDK_DIR)"),)
    collective_backends = {"xccl": "targets.kunlun.xccl"}     # BKCL, for runtime.collectives

    @property
    def device_backend(self) -> str:
        # the XPU runtime binding when libxpurt and its header are installed; otherwise host
        # emulation, whose device is the host
        return "targets.kunlun.device:KunlunDevice" if sdk.runtime_available()[0] else "runtime.device:CPUDevice"

    def status(self) -> list[str]:
        """For `python -m targets -v`: which build and runtime paths this machine takes."""
        xtdk = toolchain.find_xtdk()
        lines = [f"build: XTDK at {xtdk}" if xtdk else
                 "build: host emulation (no XTDK: set XTDK_DIR or put its clang++ on PATH)"]
        for what, (ok, why) in (("runtime (libxpurt)", sdk.runtime_available()),
                                ("collectives (libbkcl)", sdk.bkcl_available())):
            lines.append(f"{what}: {'found' if ok else why}")
        return lines

    def available(self) -> tuple[bool, str]:
        if toolchain.find_xtdk() is None and toolchain.cpu_toolchain.find_compiler() is None:
            return False, "neither XTDK (XTDK_DIR) nor a host C++ compiler for the emulation was found"
        return True, ""

    def create(self, variant: str | None) -> KunlunTarget:
        return KunlunTarget(variant or DEFAULT_ARCH)


TARGET = KunlunPlugin()
