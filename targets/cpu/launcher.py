"""Loads a built cpu kernel and launches it.

The kernel library has two entries (templates/kernel.cpp.j2): `tj_launch_packed`, called by the
compiled launch path (compiler.fastpath: the grid and arguments converted in C, the GIL released
during the kernel), and `tj_launch`, called through ctypes where that path is unavailable (no
Python headers or C compiler; ctypes also releases the GIL). Either way every launch checks the
grid against the target's limits and every argument (a plain tensor on the cpu with its
specialisation's dtype and a data pointer, ints that fit their parameter); what the kernel reports
(a run-time loop step of 0; in bounds-checked mode an access outside a tensor) becomes an error
naming the kernel, the op's source line and the argument. Both pass the kernel the grain rule's
process-wide settings (parallel.py).
"""
from __future__ import annotations

import ctypes
import logging

import torch

from compiler import dtypes as D
from compiler.errors import DeviceAssertionError, KernelArgumentError, KernelBoundsError, TargetError
from compiler.fastpath import fast_module
from compiler.ir.ops import ASSERT
from compiler.target import launch_grid
from compiler.target.args import scalar_value, tensor_pointer, view_range

from . import parallel

log = logging.getLogger("targets.cpu")

_CTYPES = {D.int1: ctypes.c_bool, D.int8: ctypes.c_int8, D.int16: ctypes.c_int16, D.int32: ctypes.c_int32,
           D.int64: ctypes.c_int64, D.float32: ctypes.c_float}
# parameter kinds of the compiled launch path (compiler/fastpath/tjfast.c)
_KIND = {D.int1: 1, D.int8: 2, D.int16: 3, D.int32: 4, D.int64: 5, D.float32: 6}
STEP0, BOUNDS = 1, 2   # tj_status codes (tilejit_cpu.h)


class Status(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("site", ctypes.c_int32), ("arg", ctypes.c_int32),
                ("store", ctypes.c_int32), ("offset", ctypes.c_int64), ("lo", ctypes.c_int64),
                ("hi", ctypes.c_int64), ("par", ctypes.c_void_p)]


class Range(ctypes.Structure):
    _fields_ = [("base", ctypes.c_int64), ("lo", ctypes.c_int64), ("hi", ctypes.c_int64)]


def ctype_of(dt: D.dtype):
    return ctypes.c_void_p if dt.is_ptr() else _CTYPES[dt]


class CPULauncher:
    """One loaded specialisation; `launcher(grid, args)` with the kernel's whole argument tuple."""

    def __init__(self, lib_path: str, fn, arg_indices: list[int], caps, bounds: bool = False):
        self.lib = ctypes.CDLL(lib_path)
        self.name = fn.name
        self.param_names = [p.name for p in fn.params]
        self.param_types = [p.type.dtype for p in fn.params]
        self.plan = list(zip(arg_indices, self.param_types))
        self.torch_dtypes = tuple(D.DTYPE_TO_TORCH[t.element_ty] if t.is_ptr() else None for t in self.param_types)
        self.caps, self.bounds = caps, bounds
        self.locs = [op.loc for op in fn.walk()]   # a status's site is an op index in this order
        self.entry = self.lib.tj_launch
        self.entry.argtypes = ([ctypes.POINTER(Status)] + [ctypes.c_int32] * 3
                               + [ctype_of(t) for t in self.param_types]
                               + ([ctypes.POINTER(Range)] if bounds else []))
        self.entry.restype = ctypes.c_int
        # the kernel's tl.device_assert calls, (location, message) each: checked after every launch
        self.asserts = [(op.loc, op.attrs["msg"]) for op in fn.walk() if op.name == ASSERT]
        if self.asserts:
            self.lib.tj_assert_status.argtypes = [ctypes.POINTER(ctypes.c_int)]

    def compiled(self):
        """The compiled launcher over this library's packed entry, or None (then call this object)."""
        mod = fast_module()
        if mod is None:
            return None
        entry = ctypes.cast(self.lib.tj_launch_packed, ctypes.c_void_p).value
        return mod.Launcher(entry, [0 if t.is_ptr() else _KIND[t] for t in self.param_types],
                            [i for i, _ in self.plan], self.torch_dtypes, tuple(self.caps.max_grid),
                            min(self.caps.max_programs, 2 ** 63 - 1), (torch.Tensor, torch.nn.Parameter),
                            "is_cpu", self, self.bounds, parallel.ADDRESS)

    # -- the checked Python path (the compiled launcher's slow path, and the ctypes launch) ------
    def prepare(self, grid, args):
        """(g0, g1, g2, values, ranges) of a launch, every argument checked; None for an empty grid."""
        g = launch_grid(self.name, grid, self.caps)
        if g is None:
            return None
        if len(args) <= max((i for i, _ in self.plan), default=-1):
            raise KernelArgumentError(f"kernel '{self.name}': the launch has {len(args)} arguments, the kernel "
                                      f"reads argument {max(i for i, _ in self.plan)}")
        values, ranges = [], []
        for (i, dt), name, tdt in zip(self.plan, self.param_names, self.torch_dtypes):
            a = args[i]
            if dt.is_ptr():
                p = tensor_pointer(self.name, name, a, "cpu", tdt)
                values.append(p)
                ranges.append(view_range(a, p) if self.bounds else None)
            else:
                values.append(scalar_value(self.name, name, a, dt.name))
                ranges.append(None)
        return (*g, values, ranges if self.bounds else None)

    def __call__(self, grid, args) -> None:
        prep = self.prepare(grid, args)
        if prep is None:
            return   # an empty grid runs nothing, as on a GPU
        g0, g1, g2, values, ranges = prep
        st = Status(par=parallel.ADDRESS)
        extra = []
        if self.bounds:
            extra = [(Range * len(ranges))(*[Range(*r) if r else Range() for r in ranges])]
        rc = self.entry(ctypes.byref(st), g0, g1, g2, *values, *extra)
        if rc or st.code:
            self.status(st.code or rc, st.site, st.arg, st.store, st.offset, st.lo, st.hi)
        if self.asserts:
            rec = (ctypes.c_int * 4)()
            if self.lib.tj_assert_status(rec):
                raise device_assertion(self.name, self.asserts, list(rec))

    def status(self, code, site, arg, store, offset, lo, hi):
        """Raises the error for a status the kernel reported."""
        loc = self.locs[site] if 0 <= site < len(self.locs) else None
        where = f" at {loc.filename}:{loc.lineno}" if loc is not None and loc.filename else ""
        if code == STEP0:
            raise KernelArgumentError(
                f"kernel '{self.name}': a run-time loop{where} has a step of 0; range() steps must be nonzero. "
                "The loop did not run, so the outputs are incomplete.")
        if code == BOUNDS:
            what = "store to" if store else "load from"
            who = f"argument '{self.param_names[arg]}'" if 0 <= arg < len(self.param_names) else \
                "a pointer that may come from several arguments"
            raise KernelBoundsError(
                f"kernel '{self.name}': {what} {who}{where} at element offset {offset}, outside its extent "
                f"[{lo}, {hi}) (the elements of its view, from its first to its last, counted from its data "
                "pointer). Mask the access "
                "(e.g. mask=offs < n) or fix the offsets. The access was skipped; the outputs are incomplete. "
                "(bounds-checked launch: TILEJIT_CPU_BOUNDS_CHECK=1)")
        raise TargetError(f"kernel '{self.name}': the launch reported status {code}")


def load_launcher(lib_path: str, fn, arg_indices: list[int], caps, bounds: bool = False):
    """The launcher of one built kernel: the compiled one when available, else the ctypes one."""
    py = CPULauncher(lib_path, fn, arg_indices, caps, bounds)
    if py.asserts:   # the Python path reads the assert status after each launch
        return py
    return py.compiled() or py


def device_assertion(kernel: str, asserts, rec):
    """The error for failed assert number rec[0] in program (rec[1], rec[2], rec[3])."""
    loc, msg = asserts[rec[0]]
    return DeviceAssertionError.at(loc, f"device_assert failed in program ({rec[1]}, {rec[2]}, {rec[3]}): {msg}",
                                   kernel=kernel)
