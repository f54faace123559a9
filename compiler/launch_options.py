"""Launch and decorator options: Triton's `num_warps=`, `num_stages=`, ... beside a kernel's own
arguments.

A launch `k[grid](x, n, BLOCK=128, num_warps=8)`, a decorator `@kernel(num_warps=8)` /
`@triton.jit(do_not_specialize=["n"])` and a `triton.Config(..., num_warps=8)` all accept the
options below. A target says which of them its build honours (`Target.launch_options`: the gpu
target forwards them to `triton.compile`, and they are part of its cache key); everywhere else
they are accepted and have no effect, so a kernel launched with them compiles once, whatever their
values. A name that is neither a parameter nor an option is a KernelArgumentError that names it,
suggests the closest valid name and lists the valid ones.
"""
from __future__ import annotations

import difflib

from .errors import KernelArgumentError

# name -> what it does where it does something. Launch options may also be given to the
# decorator (as defaults for every launch) and to triton.Config.
LAUNCH = {
    "num_warps": "gpu: warps per program (a power of two)",
    "num_stages": "gpu: software-pipelining stages of loops",
    "num_ctas": "gpu (cuda): CTAs per cluster",
    "maxnreg": "gpu (cuda): register limit per thread",
    "enable_fp_fusion": "gpu: allow contracting a*b+c into fma (the strict policy never does)",
    "debug": "gpu: Triton's debug mode (device asserts, overflow checks)",
    "launch_cooperative_grid": "gpu: cooperative launch",
    "launch_pdl": "gpu (cuda): programmatic dependent launch",
    "waves_per_eu": "gpu (hip): occupancy hint",
    "matrix_instr_nonkdim": "gpu (hip): MFMA instruction size",
    "kpack": "gpu (hip): MFMA k packing",
    "schedule_hint": "gpu (hip): instruction scheduling variant",
    "grf_mode": "Intel XPU register file mode: no effect on any tilejit target",
    "num_consumer_groups": "older Triton warp specialisation: no effect",
    "num_buffers_warp_spec": "older Triton warp specialisation: no effect",
    "num_ctas_per_cluster": "no effect",
}
# Kunlun Triton's options (FlagTree's xpu backend, XPUOptions; Kunlun's own kernels pass some at
# launch, e.g. vllm-kunlun's): what each does there and on tilejit's kunlun target is in docs/kunlun.md
KUNLUN = {
    "groups_per_cluster": "Kunlun Triton: core groups sharing one program's tile; no effect (a tilejit program runs "
                          "on one core)",
    "is_use_mask_zero": "Kunlun Triton: masked-off DMA lanes read as zero; no effect (tilejit copies the true runs "
                        "and writes `other` itself)",
    "isCloseUnrollControl": "Kunlun Triton: skip its unroll-control pass; no effect",
    "isCloseVectorization": "kunlun: no SIMD code (scalar loops; strict keeps its bits); no effect elsewhere",
    "isCloseMemoryAsync": "kunlun: no asynchronous DMA (no row batches, no tiles fetched ahead); no effect elsewhere",
    "buffer_size_limit": "Kunlun Triton: elements per core-local buffer; no effect (tilejit plans LM in bytes from "
                         "the arch table)",
    "unroll_num": "Kunlun Triton: unroll factor of its buffer loops; no effect",
    "cluster_num": "Kunlun Triton: clusters launched; no effect (the arch table's)",
    "core_num": "Kunlun Triton: cores per cluster launched; no effect (the arch table's)",
    "isOpenCmpNan": "Kunlun Triton: IEEE NaN comparisons; no effect (tilejit's comparisons always are)",
    "isCloseOffsetAnalysis": "Kunlun Triton: skip a pass; no effect",
    "isCloseCoreTiling": "Kunlun Triton: skip a pass; no effect",
    "isCloseMemoryCache": "Kunlun Triton: skip a pass; no effect",
    "isCloseClusterLoopGrid": "Kunlun Triton: skip a pass; no effect",
    "isClusterOneCoreActOnly": "Kunlun Triton: one core of a cluster computes; no effect",
    "isCLOSE_TTXPU_O_ATOMIC_SIM": "Kunlun Triton: skip its atomic simulation; no effect",
    "isCloseDtypeConvert": "Kunlun Triton: skip a pass; no effect",
    "isCloseInterleave": "Kunlun Triton: skip a pass; no effect",
    "exp_range": "Kunlun Triton (SDNN): input range of its exp table; no effect",
    "is_sdnn": "Kunlun Triton: compile for the SDNN matrix unit; no effect",
    "use_int4_w4a8": "Kunlun Triton (SDNN): int4 weights; no effect",
}
LAUNCH.update(KUNLUN)
# only meaningful on the decorator
DECORATOR = {
    "do_not_specialize": "parameters (names or indices) whose integer value never specialises the kernel "
                         "(no ==1 constant, no divisibility-by-16 hint): one compiled kernel for every value",
    "do_not_specialize_on_alignment": "parameters that get no divisibility-by-16 hint",
    "noinline": "helpers are always inlined by tilejit: no effect",
    "version": "no effect", "repr": "no effect", "launch_metadata": "no effect",
}
_BOOL = {"enable_fp_fusion", "debug", "launch_cooperative_grid", "launch_pdl", "is_use_mask_zero", "is_sdnn",
         "use_int4_w4a8"} | {k for k in KUNLUN if k.startswith(("isClose", "isOpen", "isCluster", "isCLOSE"))}
_POSITIVE = {"num_ctas", "maxnreg", "groups_per_cluster", "buffer_size_limit", "unroll_num", "cluster_num", "core_num"}


def _check_value(kernel: str, name: str, v) -> None:
    if v is None:
        return
    if name == "num_warps":
        ok = isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0
        want = "a positive power of two"
    elif name == "num_stages" or name in _POSITIVE:
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= (0 if name == "num_stages" else 1)
        want = "a positive int"
    elif name in _BOOL:
        ok = isinstance(v, (bool, int))
        want = "a bool"
    elif name == "exp_range":
        ok = isinstance(v, str) and v.count(":") <= 1
        want = "a range string such as '-10:0'"
    else:
        return
    if not ok:
        raise KernelArgumentError(f"kernel '{kernel}': launch option {name}={v!r} must be {want}")


def unknown_error(kernel: str, params, bad: str, where: str = "argument") -> KernelArgumentError:
    """The error for a keyword that is neither a parameter of `kernel` nor an option."""
    valid = list(params) + sorted(LAUNCH)
    close = difflib.get_close_matches(bad, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return KernelArgumentError(
        f"kernel '{kernel}': unknown {where} '{bad}'.{hint} Parameters: {', '.join(params)}; launch options: "
        f"{', '.join(sorted(LAUNCH))}.")


def split(kernel: str, params: frozenset, order, kwargs: dict) -> tuple[dict, dict]:
    """(the kernel's own keyword arguments, the launch options) of a launch's keywords; raises on a
    keyword that is neither (a parameter's name wins over an option's)."""
    extra = kwargs.keys() - params
    if not extra:
        return kwargs, {}
    opts = {}
    for k in extra:
        if k not in LAUNCH:
            raise unknown_error(kernel, order, k)
        _check_value(kernel, k, kwargs[k])
        opts[k] = kwargs[k]
    return {k: v for k, v in kwargs.items() if k not in opts}, opts


def decorator_options(kernel: str, arg_names: list[str], options: dict | None):
    """(launch defaults, do_not_specialize names, do_not_specialize_on_alignment names) from the
    keywords a decorator was given; raises on an unknown one."""
    defaults, nospec, noalign = {}, frozenset(), frozenset()
    for k, v in (options or {}).items():
        if k in LAUNCH:
            _check_value(kernel, k, v)
            if v is not None:
                defaults[k] = v
        elif k in ("do_not_specialize", "do_not_specialize_on_alignment"):
            names = _param_names(kernel, arg_names, k, v)
            if k == "do_not_specialize":
                nospec = names
            else:
                noalign = names
        elif k not in DECORATOR:
            valid = sorted(LAUNCH) + sorted(DECORATOR)
            close = difflib.get_close_matches(k, valid, n=1)
            raise KernelArgumentError(
                f"kernel '{kernel}': unknown decorator option '{k}'."
                + (f" Did you mean '{close[0]}'?" if close else "") + f" Valid options: {', '.join(valid)}.")
    return defaults, nospec, noalign


def _param_names(kernel, arg_names, what, value) -> frozenset:
    if value is None:
        return frozenset()
    if isinstance(value, (str, int)):
        value = [value]
    out = set()
    for v in value:
        if isinstance(v, int) and not isinstance(v, bool):
            if not 0 <= v < len(arg_names):
                raise KernelArgumentError(f"kernel '{kernel}': {what} index {v} is out of range "
                                          f"(the kernel has {len(arg_names)} parameters)")
            out.add(arg_names[v])
        elif isinstance(v, str) and v in arg_names:
            out.add(v)
        else:
            close = difflib.get_close_matches(str(v), arg_names, n=1)
            raise KernelArgumentError(f"kernel '{kernel}': {what} names {v!r}, which is not a parameter."
                                      + (f" Did you mean '{close[0]}'?" if close else "")
                                      + f" Parameters: {', '.join(arg_names)}")
    return frozenset(out)


def for_target(target, options: dict) -> tuple:
    """The options `target`'s build honours, as a sorted tuple of (name, value) (empty elsewhere):
    what goes into the specialisation key and the IR's specialisation."""
    honoured = target.launch_options
    if not honoured or not options:
        return ()
    return tuple(sorted((k, v) for k, v in options.items() if k in honoured))
