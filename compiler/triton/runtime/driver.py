"""`triton.runtime.driver.active`: what host code asks the driver, answered for the current tilejit
target (`TILEJIT_TARGET` / `use_target`): its torch device, a `GPUTarget`-like triple, device
properties (the real ones of a CUDA/ROCm device on the gpu target; nominal, labelled figures
elsewhere), and streams (0 off the gpu)."""
from __future__ import annotations

import dataclasses
import os
import platform

from ...target import current_target


@dataclasses.dataclass(frozen=True)
class GPUTarget:
    """Triton's (backend, arch, warp_size): cuda/hip with their arch on the gpu target, else the
    tilejit target's family ("cpu", "kunlun") and variant."""

    backend: str
    arch: object
    warp_size: int


class DeviceUtils:
    def get_device_properties(self, device=0) -> dict:
        """Triton's keys. On a CUDA/ROCm device, torch's figures; elsewhere: multiprocessor_count is
        the number of parallel units (CPU cores; Kunlun cores), max_shared_mem the target's local
        memory per program (0 if unlimited), and the register figures are nominal."""
        t = current_target()
        if t.device_type == "cuda":
            import torch  # noqa: PLC0415
            p = torch.cuda.get_device_properties(device)
            return {"max_shared_mem": getattr(p, "shared_memory_per_block_optin", 49152),
                    "multiprocessor_count": p.multi_processor_count,
                    "max_num_regs": getattr(p, "regs_per_multiprocessor", 65536),
                    "warpSize": getattr(p, "warp_size", 32), "sm_clock_rate": getattr(p, "clock_rate", 0),
                    "mem_clock_rate": getattr(p, "memory_clock_rate", 0),
                    "mem_bus_width": getattr(p, "memory_bus_width", 0)}
        arch = getattr(t, "arch", None)
        cores = getattr(arch, "cores", None) or os.cpu_count() or 1
        return {"max_shared_mem": t.caps.local_memory_bytes or 0, "multiprocessor_count": int(cores),
                "max_num_regs": 65536, "warpSize": t.caps.lanes_per_program if t.caps.lanes_per_program > 1 else 32,
                "sm_clock_rate": 0, "mem_clock_rate": 0, "mem_bus_width": 0}


class ActiveDriver:
    utils = DeviceUtils()

    def get_active_torch_device(self):
        import torch  # noqa: PLC0415
        t = current_target()
        return torch.device("cuda", torch.cuda.current_device()) if t.device_type == "cuda" else torch.device(
            t.device_type)

    def get_current_target(self) -> GPUTarget:
        t = current_target()
        backend = getattr(t, "backend", None)
        if backend in ("cuda", "hip"):
            arch = t.arch
            if backend == "cuda":
                arch = int(str(arch).removeprefix("sm_").removesuffix("a"))
            return GPUTarget(backend, arch, 32 if backend == "cuda" else 64)
        family, _, variant = t.name.partition(":")
        arch = getattr(getattr(t, "arch", None), "name", None) or variant or platform.machine()
        return GPUTarget(family, arch, 1)

    def get_current_device(self) -> int:
        if current_target().device_type == "cuda":
            import torch  # noqa: PLC0415
            return torch.cuda.current_device()
        return 0

    def set_current_device(self, device) -> None:
        if current_target().device_type == "cuda":
            import torch  # noqa: PLC0415
            torch.cuda.set_device(device)

    def get_current_stream(self, device=None) -> int:
        if current_target().device_type == "cuda":
            import torch  # noqa: PLC0415
            return torch.cuda.current_stream(device).cuda_stream
        return 0

    def get_device_interface(self):
        import torch  # noqa: PLC0415
        return torch.cuda if current_target().device_type == "cuda" else torch.cpu

    def get_empty_cache_for_benchmark(self):
        import torch  # noqa: PLC0415
        return torch.empty(64 * 1024 * 1024 // 4, dtype=torch.int32, device=self.get_active_torch_device())

    def clear_cache(self, cache) -> None:
        cache.zero_()

    def is_active(self) -> bool:
        return True


class DriverConfig:
    """`triton.runtime.driver`: `.active` (and `.default`) answer for the current target."""

    def __init__(self):
        self.default = self.active = ActiveDriver()

    def set_active(self, driver) -> None:
        self.active = driver

    def reset_active(self) -> None:
        self.active = self.default


driver = DriverConfig()
