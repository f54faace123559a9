"""How library ops allocate their outputs: torch.empty, with large cpu outputs on huge pages.

A fresh output is new memory, and its first write faults every page in: a 64 MiB layer_norm
output took ~20 ms of 4 KiB page faults on a 2-core host against ~4 ms for the writes themselves,
in tilejit and in torch alike (torch's CPU allocator keeps no cache). Where Linux hands out
transparent huge pages on request (`madvise` mode, a common default), an output of at least
`HUGE_MIN_BYTES` asks for them: one fault per 2 MiB instead of 512 (that output: ~4 ms). The
tensor is still torch's own (its allocator, its deleter, resizable); only the advice on its pages
changes, and only on its 2 MiB-aligned part, which the outputs fill whole. Where Linux always
backs memory with huge pages, or never, or on another system, nothing is done.
`TILEJIT_HUGE_PAGES=0` turns it off (read at import).

A launch plan's replay (kernels/op_plans.py) allocates through `maker`: a smaller cpu output
comes from torch's allocation entry for compiled code, which skips the dispatcher and the
argument parser (1.7 us a tensor where torch.empty_like takes 2.5 us).
"""
from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import sys

import torch

HUGE_PAGE = 2 << 20
# two huge pages: below that the aligned part may be empty, and the faults cost little anyway
HUGE_MIN_BYTES = 2 * HUGE_PAGE
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def _madvise():
    """libc's madvise when huge pages are handed out on request and not turned off, else None."""
    if not sys.platform.startswith("linux") or os.environ.get("TILEJIT_HUGE_PAGES", "1") == "0":
        return None
    try:
        with open(THP_ENABLED) as f:
            mode = f.read()
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    if "[madvise]" not in mode:
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()


def wants_huge_pages(nbytes: int, device: torch.device) -> bool:
    """Whether an output of `nbytes` on `device` asks for huge pages (`new_output` decides so)."""
    return _MADVISE is not None and nbytes >= HUGE_MIN_BYTES and device.type == "cpu"


def on_huge_pages(t: torch.Tensor) -> torch.Tensor:
    """Asks for huge pages under a freshly allocated `t` if it is large and on the cpu; returns `t`.
    Advice only: a refusal (the call's result) changes nothing but the speed of the first write."""
    if wants_huge_pages(t.nbytes, t.device):
        # a fresh tensor: its storage starts at data_ptr and holds nbytes
        start, n = t.data_ptr(), t.nbytes
        lo = -(-start // HUGE_PAGE) * HUGE_PAGE
        hi = (start + n) // HUGE_PAGE * HUGE_PAGE
        if hi > lo:
            _MADVISE(lo, hi - lo, mmap.MADV_HUGEPAGE)
    return t


def new_output(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype, device=device), on huge pages when large."""
    return on_huge_pages(torch.empty(shape, dtype=dtype, device=device))


# torch's torch.empty_strided for the cpu as inductor's generated code calls it (it keeps
# inference mode); a private name, so looked up, with torch.empty_strided where it is absent
_EMPTY_STRIDED_CPU = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None), "_empty_strided_cpu", None)


def maker(shape, strides, dtype: torch.dtype, device: torch.device):
    """A callable of no arguments that allocates an uninitialised output of `shape`, `strides`,
    `dtype` and `device`, as fast as torch allows (on huge pages when large, as `new_output`)."""
    shape, strides = tuple(shape), tuple(strides)
    if _EMPTY_STRIDED_CPU is not None and device.type == "cpu" and not wants_huge_pages(
            dtype.itemsize * math.prod(shape), device):
        return functools.partial(_EMPTY_STRIDED_CPU, shape, strides, dtype)
    return functools.partial(_new_strided, shape, strides, dtype, device)


def _new_strided(shape, strides, dtype, device) -> torch.Tensor:
    return on_huge_pages(torch.empty_strided(shape, strides, dtype=dtype, device=device))


def new_output_like(t: torch.Tensor) -> torch.Tensor:
    """torch.empty_like(t), on huge pages when large."""
    return on_huge_pages(torch.empty_like(t))


__all__ = ["HUGE_PAGE", "HUGE_MIN_BYTES", "on_huge_pages", "maker", "new_output", "new_output_like",
           "wants_huge_pages"]
