"""Argument checks shared by the library ops' torch-facing wrappers. The common case (a plain
tensor of a supported dtype) costs a type test and a set lookup; the thorough checks run only
for anything else."""
from __future__ import annotations

import torch

from compiler import cdiv, current_target  # noqa: F401 - cdiv: the wrappers' grid arithmetic
from compiler.target.args import is_fake, unusable

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# the torch operators (kernels/torch_ops.py) also take float64: they compute it by the fp64 reference
OP_DTYPES = FLOAT_DTYPES + (torch.float64,)
_FLOATS = frozenset(FLOAT_DTYPES)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# a cheap per-tensor test of the device type (t.device makes a new object on every access)
_ON = {"cpu": "is_cpu", "cuda": "is_cuda"}


def check_tensor(op: str, name: str, t, *, dims=None, dtypes=FLOAT_DTYPES) -> None:
    """TypeError unless `t` is a tensor with memory of one of `dtypes`; ValueError unless it has `dims` dims."""
    if type(t) not in _PLAIN:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
        # meta and fake tensors are the torch operators' shape-only inputs (their fake
        # implementation); an op that would launch on one refuses it itself (torch_ops.require_storage)
        why = None if t.is_meta or is_fake(t) else unusable(t)
        if why:
            raise TypeError(f"{op}: argument '{name}' {why}")
    if dtypes is not None and t.dtype not in (_FLOATS if dtypes is FLOAT_DTYPES else dtypes):
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
    """ValueError unless every tensor lives on the device type the current target runs on (and,
    beyond the host, on one device)."""
    target = current_target()
    want = target.device_type
    flag = _ON.get(want)
    if flag == "is_cpu":
        for t in tensors.values():
            if t is not None and not t.is_cpu:
                break
        else:
            return   # the host is one device
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device.type != want:
            raise ValueError(f"{op}: argument '{name}' is on device '{t.device}', but the current "
                             f"target '{target.name}' runs on '{want}' tensors")
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ValueError(f"{op}: argument '{name}' is on {t.device} but '{first[0]}' is on {first[1]}")


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory tensor `t` addresses."""
    lo = hi = 0
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            return 0, 0
        if stride < 0:
            lo += (size - 1) * stride
        else:
            hi += (size - 1) * stride
    item = t.element_size()
    return t.data_ptr() + lo * item, t.data_ptr() + (hi + 1) * item


def self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of `t` may share memory (an expanded view, a stride 0, interleaved
    strides): dims sorted by stride must each step over all the elements of the smaller ones."""
    extent = 1
    for size, stride in sorted(((s, abs(st)) for s, st in zip(t.shape, t.stride()) if s > 1), key=lambda d: d[1]):
        if stride < extent:
            return True
        extent = stride * size
    return False


def check_out(op: str, out: torch.Tensor, **inputs) -> None:
    """ValueError when `out` has elements that share memory, or overlaps an input: torch refuses
    both ("more than one element of the written-to tensor refers to a single memory location"),
    and a kernel would read inputs it has already overwritten."""
    # no memory to compare: empty, shape-only, or traced by torch.compile (the traced graph runs the
    # operator, which reads and writes through the tensors it is given)
    if torch.compiler.is_compiling() or out.numel() == 0 or out.is_meta or is_fake(out):
        return
    if self_overlapping(out):
        raise ValueError(f"{op}: out (shape {tuple(out.shape)}, strides {out.stride()}) has elements that share "
                         "memory (an expanded or overlapping view); pass a tensor whose elements are distinct, e.g. "
                         "torch.empty(...) or out.clone()")
    lo, hi = _span(out)
    for name, t in inputs.items():
        if t is None or t.numel() == 0:
            continue
        a, b = _span(t)
        if a < hi and lo < b:
            raise ValueError(f"{op}: out overlaps the memory of input '{name}'; the kernel would read values it "
                             "has already overwritten. Pass a separate output tensor (or out=None).")


def checked_config(op: str, spec, config: dict) -> dict:
    """A copy of a caller's `config=`, or ValueError saying why the op cannot run it."""
    why = spec.config_problem(config)
    if why:
        raise ValueError(f"{op}: config {config!r} cannot run: {why}")
    return dict(config)


_config_texts: dict = {}


def config_text(op: str, spec, config: dict | None) -> str | None:
    """A caller's `config=` as the op's `str? config` argument (None for none), checked as
    `checked_config` does. Memoised by the op and the config's items with their types (True is not
    1), so a call that passes the same config again pays a dict hit and replays its launch plan
    like a call without one (rms_norm on [1, 64]: 16.8 -> 7.9 us, 6.5 us without config=)."""
    if not config:
        return None
    try:
        key = (op, tuple(config.items()), tuple(map(type, config.values())))
        text = _config_texts.get(key)
    except (TypeError, AttributeError):   # not a dict of hashable values: the check says why
        key, text = None, None
    if text is None:
        from .torch_ops import encode_config  # noqa: PLC0415 - torch_ops is the string form's home
        text = encode_config(checked_config(op, spec, config))
        if key is not None:
            if len(_config_texts) > 4096:
                _config_texts.clear()
            _config_texts[key] = text
    return text
