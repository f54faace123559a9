"""Loads a built kernel with ctypes and launches it. ctypes releases the GIL for the call, so
kernels on two Python threads run at the same time."""
from __future__ import annotations

import ctypes

from compiler import dtypes as D
from compiler.target import launch_grid

_CTYPES = {D.int1: ctypes.c_bool, D.int8: ctypes.c_int8, D.int16: ctypes.c_int16, D.int32: ctypes.c_int32,
           D.int64: ctypes.c_int64, D.float32: ctypes.c_float}


def ctype_of(dt: D.dtype):
    return ctypes.c_void_p if dt.is_ptr() else _CTYPES[dt]


class CPULauncher:
    def __init__(self, lib_path: str, fn_name: str, param_types: list[D.dtype], param_names: list[str],
                 arg_indices: list[int], caps, asserts=()):
        self.lib = ctypes.CDLL(lib_path)
        self.entry = self.lib.tj_launch
        self.entry.argtypes = [ctypes.c_int32] * 3 + [ctype_of(t) for t in param_types]
        self.entry.restype = None
        self.name = fn_name
        self.param_names = param_names
        # (position in the launch's arguments, passed as a data pointer?) per kernel parameter
        self.plan = [(i, t.is_ptr()) for i, t in zip(arg_indices, param_types)]
        self.caps = caps
        # the kernel's tl.device_assert calls, (location, message) each: checked after every launch
        self.asserts = list(asserts)
        if self.asserts:
            self.lib.tj_assert_status.argtypes = [ctypes.POINTER(ctypes.c_int)]

    def __call__(self, grid, args) -> None:
        g = launch_grid(self.name, grid, self.caps)
        if g is None:
            return  # an empty grid runs nothing, as on a GPU
        self.entry(*g, *[args[i].data_ptr() if ptr else args[i] for i, ptr in self.plan])
        if self.asserts:
            rec = (ctypes.c_int * 4)()
            if self.lib.tj_assert_status(rec):
                raise device_assertion(self.name, self.asserts, list(rec))


def device_assertion(kernel: str, asserts, rec):
    """The error for failed assert number rec[0] in program (rec[1], rec[2], rec[3])."""
    from compiler.errors import DeviceAssertionError  # noqa: PLC0415
    loc, msg = asserts[rec[0]]
    return DeviceAssertionError.at(loc, f"device_assert failed in program ({rec[1]}, {rec[2]}, {rec[3]}): {msg}",
                                   kernel=kernel)
