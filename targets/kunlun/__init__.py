"""The `kunlun` target (`kunlun:xpu2`, `kunlun:xpu3`; `kunlun` alone = xpu3): Kunlun XPU C++
(`.xpu`) from the C-family lowering, built with XTDK when present, otherwise the same source
built for the host against xpu_emulation.h. See docs/kunlun.md for what is verified here.

    arch.py     the chip figures (one table)          codegen/   .xpu generation, LM budget
    target.py   the Target                            build/     XTDK or host-emulation builds, SDK discovery
    runtime/    launcher, XPU runtime, BKCL           tune/      LM footprint probe, cost model
"""
from __future__ import annotations

from compiler.target import Requirement, TargetPlugin, command_version

from .arch import ARCHS, DEFAULT_ARCH
from .build import sdk, toolchain
from .plan.explain import LMBudgetError
from .target import KunlunTarget

__all__ = ["ARCHS", "KunlunTarget", "KunlunPlugin", "LMBudgetError", "TARGET"]


class KunlunPlugin(TargetPlugin):
    """Entry-point object for `tilejit.targets`."""

    name = "kunlun"
    version = "0.1.0"
    device_kinds = ("xpu2", "xpu3")
    capabilities = ("run-emulated", "strict", "fast")
    # needed for emulation builds only: without it, the kernels already in the cache still run
    requirements = (Requirement("C++ compiler (host emulation)", "9.0",
                                lambda: command_version(toolchain.cpu_toolchain.find_compiler()),
                                hint="install g++ >= 9, or XTDK (set XTDK_DIR)", needed_for="build"),)
    collective_backends = {"xccl": "targets.kunlun.runtime.xccl"}     # BKCL, for runtime.collectives

    @property
    def device_backend(self) -> str:
        # the XPU runtime binding when libxpurt and its header are installed; otherwise host
        # emulation, whose device is the host
        return ("targets.kunlun.runtime.device:KunlunDevice" if sdk.runtime_available()[0]
                else "targets.cpu.device:CPUDevice")

    def status(self) -> list[str]:
        """For `python -m targets -v`: which build and runtime paths this machine takes."""
        xtdk = sdk.find_xtdk()
        lines = [f"build: XTDK at {xtdk}" if xtdk else
                 "build: host emulation (no XTDK: set XTDK_DIR or put its clang++ on PATH)"]
        for what, (ok, why) in (("runtime (libxpurt)", sdk.runtime_available()),
                                ("collectives (libbkcl)", sdk.bkcl_available())):
            lines.append(f"{what}: {'found' if ok else why}")
        xdnn, why = sdk.find_xdnn()
        lines.append(f"kernel headers (XDNN): {xdnn.include_dir if xdnn else why}")
        host = toolchain.host_flags()
        lines.append(f"device build flags: {' '.join(host + toolchain.DEVICE_FLAGS)}"
                     + ("" if host else " (HOST_SYSROOT unset: clang's own host sysroot)"))
        return lines

    def limited_here(self) -> str:
        if sdk.find_xtdk() is None:
            return "host emulation (no XTDK, no device)"
        return "" if sdk.runtime_available()[0] else "XTDK builds; no XPU runtime, so launches run on the host"

    def create(self, variant: str | None) -> KunlunTarget:
        return KunlunTarget(variant or DEFAULT_ARCH)


TARGET = KunlunPlugin()
