"""What every launcher checks about an argument before it hands the kernel a pointer or a scalar,
with the error that names the kernel, the argument and the fix. The compiled launch path checks
the common case in C (a plain tensor on the right device with a non-null data pointer, an int in
range) and sends everything else here."""
from __future__ import annotations

import torch

from ..errors import KernelArgumentError

_PLAIN = (torch.Tensor, torch.nn.Parameter)
INT_RANGES = {"int1": (0, 1), "int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
              "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}


def is_fake(t) -> bool:
    try:
        from torch._subclasses.fake_tensor import FakeTensor  # noqa: PLC0415
    except ImportError:   # pragma: no cover - torch without fake tensors
        return False
    return isinstance(t, FakeTensor)


def unusable(t) -> str | None:
    """Why tensor `t` has no memory a kernel can read (a FakeTensor from torch.compile tracing or
    FakeTensorMode, a meta tensor, a sparse or other non-strided layout, no storage), or None."""
    if type(t) not in _PLAIN and is_fake(t):
        return ("is a FakeTensor (torch.compile tracing or FakeTensorMode): it has no data for a kernel to "
                "read. Launch outside the traced region, or wrap the call in a custom op "
                "(torch.library.custom_op) with a fake implementation.")
    if t.is_meta:
        return ("is a meta tensor: it has a shape but no data. Pass a tensor with memory "
                "(e.g. torch.empty_like(t, device='cpu')).")
    if t.layout is not torch.strided:
        return (f"is a {str(t.layout).replace('torch.', '')} tensor; kernels take strided (dense) tensors: "
                "convert it with .to_dense()")
    try:
        t.data_ptr()
    except RuntimeError as e:
        return f"({type(t).__name__}) has no storage a kernel can address ({e}); pass a plain dense tensor"
    return None


def check_tensor_kind(kernel: str, arg: str, t) -> None:
    """KernelArgumentError naming the kernel and the argument when `unusable(t)`."""
    why = unusable(t)
    if why:
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' {why}")


def tensor_pointer(kernel: str, arg: str, t, device_type: str, dtype=None) -> int:
    """The data pointer of tensor argument `arg`, after checking its kind, device and dtype."""
    if not isinstance(t, torch.Tensor):
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' must be a tensor here (the kernel was "
                                  f"compiled for one), got {type(t).__name__}")
    check_tensor_kind(kernel, arg, t)
    if t.device.type != device_type:
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' is on device '{t.device}', but this "
                                  f"kernel runs on '{device_type}' tensors. Move it with .to('{device_type}').")
    if dtype is not None and t.dtype != dtype:
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' is a {t.dtype} tensor, but this "
                                  f"specialisation was compiled for {dtype}; launch through kernel[grid](...)")
    p = t.data_ptr()
    if p == 0 and t.numel() != 0:
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' has {t.numel()} elements but a null "
                                  "data pointer; pass a tensor with memory")
    return p


def view_range(t, ptr: int) -> tuple[int, int, int]:
    """(data pointer, first byte, one past the last byte) of what tensor `t`'s view spans: from its
    data pointer to its last element as its sizes and strides reach (torch strides are never
    negative); nothing when it has no elements. The bounds checks of host-run kernels (the cpu
    target's bounds-checked mode, Kunlun's host emulation) check accesses against it, so a view of
    a larger buffer does not let a kernel write its neighbours (compiler/fastpath/tjfast.c's
    view_range is the same rule)."""
    if t.numel() == 0:
        return ptr, ptr, ptr
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return ptr, ptr, ptr + (last + 1) * t.element_size()


def check_int(kernel: str, arg: str, value: int, bits: int = 64) -> int:
    """`value` if it fits a signed `bits`-bit parameter; a clear error instead of a truncation."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not lo <= value <= hi:
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' is {value}, outside the {bits}-bit range "
                                  f"[-2**{bits - 1}, 2**{bits - 1} - 1] of an integer kernel argument; pass a "
                                  "smaller value (kernels compute in 32- and 64-bit integers)")
    return value


def scalar_value(kernel: str, arg: str, a, dtype_name: str):
    """A scalar argument converted for a parameter of IR dtype `dtype_name`, range-checked."""
    if dtype_name == "fp32":
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' must be a float, got {type(a).__name__}")
        return float(a)
    if dtype_name == "int1":
        if not isinstance(a, (bool, int)):
            raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' must be a bool, got {type(a).__name__}")
        return int(bool(a))
    if isinstance(a, bool) or not isinstance(a, int):
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' must be an int, got {type(a).__name__}")
    lo, hi = INT_RANGES[dtype_name]
    if not lo <= a <= hi:
        raise KernelArgumentError(f"kernel '{kernel}': argument '{arg}' is {a}, outside this specialisation's "
                                  f"{dtype_name} parameter [{lo}, {hi}]; launch through kernel[grid](...)")
    return a


_FLAG = {"cpu": "is_cpu", "cuda": "is_cuda"}


def check_tensors(kernel: str, names, tensors, device_type: str) -> None:
    """The warm-path check of launchers that hand tensors on to someone else (Triton, the Kunlun
    runtime): a plain tensor on `device_type` with a data pointer passes after two attribute
    reads; anything else gets `tensor_pointer`'s full check and its error."""
    flag = _FLAG.get(device_type)
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            continue
        if type(t) in _PLAIN and flag is not None and getattr(t, flag) and (t.data_ptr() or not t.numel()):
            continue
        tensor_pointer(kernel, name, t, device_type)
