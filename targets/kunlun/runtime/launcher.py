"""Loads a built kunlun kernel with ctypes. Under host emulation tensors are host tensors; the
launcher registers their byte ranges for the DMA bounds check and turns an emulation error
(out-of-bounds GM2LM/LM2GM, named by runtime/sites.py; LM overflow) into a Python exception."""
from __future__ import annotations

import ctypes
import threading

import torch

from compiler import dtypes as D
from compiler.errors import KernelArgumentError, KernelBoundsError, TargetError
from compiler.target import launch_grid
from compiler.target.args import scalar_value, tensor_pointer, view_range

from . import scratch

# an int64 argument is tj_i64 in the kernel: 8 bytes, passed like an int64_t
_CTYPES = {D.int1: ctypes.c_bool, D.int8: ctypes.c_int8, D.int16: ctypes.c_int16, D.int32: ctypes.c_int32,
           D.int64: ctypes.c_int64, D.float32: ctypes.c_float}
INT32_MAX = 2 ** 31 - 1


class KunlunLaunchError(TargetError):
    pass


class KunlunBoundsError(KunlunLaunchError, KernelBoundsError):
    """Host emulation: a DMA outside every tensor passed to the kernel (runtime/sites.py words it)."""


def ctype_of(dt: D.dtype):
    return ctypes.c_void_p if dt.is_ptr() else _CTYPES[dt]


class KunlunLauncher:
    def __init__(self, lib_path: str, fn_name: str, param_types, param_names, arg_indices, caps, emulation: bool,
                 target_name: str = "kunlun", describe_site=None, scratch_bytes: int = 0):
        self.lib = ctypes.CDLL(lib_path)
        self.target_name = target_name
        self.describe_site = describe_site   # site -> (location, op, argument names): runtime/sites.py
        self.entry = self.lib.tj_launch
        self.entry.argtypes = [ctypes.c_void_p] + [ctypes.c_int32] * 3 + [ctype_of(t) for t in param_types] + \
            ([ctypes.c_void_p] if scratch_bytes else [])
        # the GM scratch workspace of the plan's lowest tier: one slot per core, taken once (scratch.py)
        self.workspace = scratch.workspace(fn_name, scratch_bytes) if scratch_bytes else None
        self.entry.restype = ctypes.c_int
        self.emulation = emulation
        if emulation:
            self.lib.tj_emu_set_regions.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                                                    ctypes.POINTER(ctypes.c_uint64)]
            self.lib.tj_emu_error.restype = ctypes.c_char_p
            self.fault = getattr(self.lib, "tj_emu_fault", None)   # absent from builds before it existed
        self.name = fn_name
        self.param_names = list(param_names)
        self.param_types = list(param_types)
        self.plan = [(i, t.is_ptr()) for i, t in zip(arg_indices, param_types)]
        self.caps = caps                # 32-bit program ids: at most INT32_MAX programs a launch
        self._lock = threading.Lock()   # the emulation's region table is per library

    def __call__(self, grid, args) -> None:
        g = launch_grid(self.name, grid, self.caps)
        if g is None:
            return
        # the warm path checks what it hands the kernel: host tensors with memory, ints that fit
        vals = [tensor_pointer(self.name, n, args[i], "cpu") if ptr else scalar_value(self.name, n, args[i], t.name)
                for (i, ptr), n, t in zip(self.plan, self.param_names, self.param_types)]
        if self.workspace is not None:
            vals.append(self.workspace.data_ptr())
        with self._lock:
            if self.emulation:   # the GM a DMA may touch: each tensor's view (not its whole storage)
                views = [view_range(args[i], v) for (i, ptr), v in zip(self.plan, vals) if ptr]
                if self.workspace is not None:   # the plan's GM scratch: the whole workspace
                    ws = self.workspace.untyped_storage()
                    views.append((None, ws.data_ptr(), ws.data_ptr() + ws.nbytes()))
                n = len(views)
                lo = (ctypes.c_uint64 * max(n, 1))(*[r[1] for r in views])
                hi = (ctypes.c_uint64 * max(n, 1))(*[r[2] for r in views])
                self.lib.tj_emu_set_regions(n, lo, hi)
            rc = self.entry(None, *g, *vals)
            if rc != 0:
                if self.emulation:
                    raise self._emulation_error(args)
                raise KunlunLaunchError(f"kernel '{self.name}' on kunlun: the launch returned {rc} "
                                        "(the XPU runtime's status)")


    def _emulation_error(self, args) -> KunlunLaunchError:
        raw = self.lib.tj_emu_error().decode()
        fault = (ctypes.c_longlong * 4)()
        if self.fault is not None:
            self.fault(fault)
        if fault[0] < 0 or self.describe_site is None:
            return KunlunLaunchError(f"kernel '{self.name}' on {self.target_name} (host emulation): {raw}")
        from .sites import bounds_error  # noqa: PLC0415 - only when a kernel went out of bounds
        tensors = {n: args[i] for (i, ptr), n in zip(self.plan, self.param_names) if ptr}
        return bounds_error(self.name, self.target_name, self.describe_site(fault[0]), tensors, list(fault), raw,
                            KunlunBoundsError)


def check_tensor(kernel_name: str, arg_name: str, t: torch.Tensor) -> None:
    if t.device.type != "cpu":
        raise KernelArgumentError(
            f"kernel '{kernel_name}': argument '{arg_name}' is on device '{t.device}'; the kunlun target runs "
            "under host emulation here and takes host tensors")
    if t.dtype == torch.uint64:
        raise KernelArgumentError(
            f"kernel '{kernel_name}': argument '{arg_name}' is a uint64 tensor; the kunlun target has no 64-bit "
            "unsigned integer (its int64 is two signed 32-bit halves). Pass `.view(torch.int64)`: +, -, *, "
            "&, |, ^ and << give the same bits; compare and divide as signed")
    nbytes = t.untyped_storage().nbytes()
    if nbytes > INT32_MAX:
        raise KernelArgumentError(
            f"kernel '{kernel_name}': argument '{arg_name}' spans {nbytes} bytes; the kunlun target's 32-bit "
            "index arithmetic (device `long`/`void*` are 4 bytes) addresses at most 2**31-1 bytes per tensor. "
            "Split the tensor or launch on slices.")
