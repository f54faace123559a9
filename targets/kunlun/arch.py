"""Kunlun XPU arch table: every chip figure the kunlun target uses, in one place.

Sources: docs/kunlun.md, Sources, "Chips" (public code and documents, by repository and path).
Figures none of them settles are listed in `Arch.unverified`; fix them here and nowhere else. Real code should ask
the runtime (`xpu_device_get_attr(..., XPUATTR_NUM_CLUSTER, dev)`) when a device is present.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arch:
    name: str
    product: str
    clusters: int                 # launch cluster_num
    cores_per_cluster: int        # launch core_num
    lm_bytes_per_core: int        # local memory per core, stack included
    lm_stack_reserve: int         # bytes of a core's LM kept for the stack (tilejit's choice)
    sm_bytes_per_cluster: int     # shared memory per cluster
    simd_bits: int
    mem_bytes: int | None         # main memory
    mem_bandwidth: float | None   # bytes/s
    l3_bytes: int | None
    l3_bandwidth: float | None
    peak_fp16_flops: float | None
    fp64: str
    # fp16 vectors (float16x32_t, vload_lm_float16x32, vfp162float_l/_h): FlagTree's
    # trigonometric.xpu uses them under __arch_xpu3__ only
    fp16_vectors: bool = False
    unverified: tuple[str, ...] = field(default=())

    @property
    def lm_budget(self) -> int:
        """Bytes of a core's LM that a kernel's tile buffers may use."""
        return self.lm_bytes_per_core - self.lm_stack_reserve

    @property
    def fp32_lanes(self) -> int:
        return self.simd_bits // 32

    @property
    def cores(self) -> int:
        return self.clusters * self.cores_per_cluster


KB, GB = 1024, 1024 ** 3

ARCHS: dict[str, Arch] = {
    "xpu2": Arch(
        name="xpu2", product="R200 (KL2)", clusters=8, cores_per_cluster=64,
        lm_bytes_per_core=8 * KB,        # 32 KB per group of 4 cores, ~8 KB per core, stack included
        lm_stack_reserve=1 * KB,         # tilejit's reserve: not a published figure
        sm_bytes_per_cluster=256 * KB, simd_bits=512,
        mem_bytes=16 * GB, mem_bandwidth=512e9, l3_bytes=64 * 1024 * KB, l3_bandwidth=1.2e12,
        peak_fp16_flops=128e12, fp64="software only: rejected by the target",
        unverified=("lm_stack_reserve",)),
    "xpu3": Arch(
        name="xpu3", product="P800 (KL3)", clusters=12, cores_per_cluster=64,
        lm_bytes_per_core=8 * KB,        # UNVERIFIED: one public comment: 32 KB group LM, 4 KB of it stack
        lm_stack_reserve=1 * KB,         # UNVERIFIED: 4 KB stack per group of 4 cores (same comment)
        sm_bytes_per_cluster=256 * KB,   # ">= 256 KB": kernels declare two 128 KB __shared__ arrays
        simd_bits=512,
        mem_bytes=96 * GB, mem_bandwidth=None,   # UNVERIFIED bandwidth: unknown
        l3_bytes=None, l3_bandwidth=None,        # UNVERIFIED: unknown
        peak_fp16_flops=345e12,                  # UNVERIFIED: third-party tables only
        fp64="not on device: rejected by the target", fp16_vectors=True,
        unverified=("lm_bytes_per_core", "lm_stack_reserve", "sm_bytes_per_cluster", "mem_bandwidth",
                    "l3_bytes", "l3_bandwidth", "peak_fp16_flops")),
}

DEFAULT_ARCH = "xpu3"   # `kunlun` alone = xpu3, the current chip


def get_arch(name: str | None) -> Arch:
    from compiler.errors import TargetError  # noqa: PLC0415
    name = name or DEFAULT_ARCH
    try:
        return ARCHS[name]
    except KeyError:
        raise TargetError(f"unknown Kunlun arch '{name}'; known: {', '.join(sorted(ARCHS))} "
                          f"(use 'kunlun:xpu2' or 'kunlun:xpu3')") from None
