"""Argument checks shared by the library ops' torch-facing wrappers."""
from __future__ import annotations

import torch

from compiler import cdiv, current_target  # noqa: F401 - cdiv: the wrappers' grid arithmetic

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# the torch operators (kernels/torch_ops.py) also take float64: they compute it by the fp64 reference
OP_DTYPES = FLOAT_DTYPES + (torch.float64,)


def check_tensor(op: str, name: str, t, *, dims=None, dtypes=FLOAT_DTYPES) -> None:
    """TypeError unless `t` is a tensor of one of `dtypes`; ValueError unless it has `dims` dims."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{op}: argument '{name}' has dtype {str(t.dtype).replace('torch.', '')}; "
                        f"supported dtypes are {allowed}")
    if dims is not None:
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if t.dim() not in dims:
            want = " or ".join(f"{d}-D" for d in dims)
            raise ValueError(f"{op}: argument '{name}' must be {want}, got shape {tuple(t.shape)}")


def check_same_dtype(op: str, ref_name: str, ref: torch.Tensor, **others) -> None:
    for name, t in others.items():
        if t is not None and t.dtype != ref.dtype:
            raise TypeError(f"{op}: argument '{name}' has dtype {str(t.dtype).replace('torch.', '')} but "
                            f"'{ref_name}' has {str(ref.dtype).replace('torch.', '')}; they must match")


def check_device(op: str, **tensors) -> None:
    """ValueError unless every tensor lives on the device type the current target runs on."""
    want = current_target().device_type
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device.type != want:
            raise ValueError(f"{op}: argument '{name}' is on device '{t.device}', but the current "
                             f"target '{current_target().name}' runs on '{want}' tensors")
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ValueError(f"{op}: argument '{name}' is on {t.device} but '{first[0]}' is on {first[1]}")
