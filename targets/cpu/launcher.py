"""Loads a built kernel with ctypes and launches it. ctypes releases the GIL for the call, so
kernels on two Python threads run at the same time."""
from __future__ import annotations

import ctypes

import torch

from compiler import dtypes as D
from compiler.errors import KernelArgumentError

_CTYPES = {D.int1: ctypes.c_bool, D.int8: ctypes.c_int8, D.int16: ctypes.c_int16, D.int32: ctypes.c_int32,
           D.int64: ctypes.c_int64, D.float32: ctypes.c_float}


def ctype_of(dt: D.dtype):
    return ctypes.c_void_p if dt.is_ptr() else _CTYPES[dt]


class CPULauncher:
    def __init__(self, lib_path: str, fn_name: str, param_types: list[D.dtype], param_names: list[str],
                 arg_indices: list[int]):
        self.lib = ctypes.CDLL(lib_path)
        self.entry = self.lib.tj_launch
        self.entry.argtypes = [ctypes.c_int32] * 3 + [ctype_of(t) for t in param_types]
        self.entry.restype = None
        self.name = fn_name
        self.param_names = param_names
        # (position in the launch's arguments, passed as a data pointer?) per kernel parameter
        self.plan = [(i, t.is_ptr()) for i, t in zip(arg_indices, param_types)]

    def __call__(self, grid, args) -> None:
        n = len(grid)
        if n == 1:
            g0, g1, g2 = grid[0], 1, 1
        elif n == 2:
            g0, g1, g2 = grid[0], grid[1], 1
        elif n == 3:
            g0, g1, g2 = grid
        else:
            raise KernelArgumentError(f"kernel '{self.name}': grid must have 1 to 3 dimensions, got {grid!r}")
        if g0 <= 0 or g1 <= 0 or g2 <= 0:
            if g0 == 0 or g1 == 0 or g2 == 0:
                return  # an empty grid runs nothing, as on a GPU
            raise KernelArgumentError(f"kernel '{self.name}': grid sizes must be >= 0, got {grid!r}")
        self.entry(g0, g1, g2, *[args[i].data_ptr() if ptr else args[i] for i, ptr in self.plan])


def check_tensor(kernel_name: str, arg_name: str, t: torch.Tensor) -> None:
    if t.device.type != "cpu":
        raise KernelArgumentError(
            f"kernel '{kernel_name}': argument '{arg_name}' is on device '{t.device}', but the target is 'cpu'. "
            "Move it with .cpu() or choose the matching target (TILEJIT_TARGET / use_target).")
