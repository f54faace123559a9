"""Integer index tensors (positions, slots, token ids) handed to library ops.

int32 and int64 are accepted. A target whose index arithmetic is 32-bit (Caps.index_bits == 32,
e.g. Kunlun, whose kernels refuse int64 tensors) gets an int32 copy made on the host, after a
range check, so the kernel is the same tile program on every target."""
from __future__ import annotations

import torch

from .checks import check_tensor, current_target

INDEX_DTYPES = (torch.int32, torch.int64)


def index_tensor(op: str, name: str, t, *, dims=None) -> torch.Tensor:
    """`t` checked (int32/int64), contiguous, and narrowed to int32 where the target needs it."""
    check_tensor(op, name, t, dims=dims, dtypes=INDEX_DTYPES)
    t = t.contiguous()
    if t.dtype == torch.int64 and current_target().caps.index_bits < 64:
        if not in_range(t, -2 ** 31, 2 ** 31):
            raise ValueError(f"{op}: argument '{name}' holds values outside int32, which target "
                             f"'{current_target().name}' (32-bit indices) cannot address")
        t = t.to(torch.int32)
    return t


def _bounds(t: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty tensor in one pass."""
    mn, mx = torch.aminmax(t)
    return int(mn), int(mx)


def in_range(t: torch.Tensor, lo: int, hi: int) -> bool:
    """Whether every value of `t` is in [lo, hi) (one pass; True for an empty tensor)."""
    if not t.numel():
        return True
    mn, mx = _bounds(t)
    return lo <= mn and mx < hi


def check_range(op: str, name: str, t: torch.Tensor, lo: int, hi: int, *, allow=None) -> None:
    """ValueError unless every value of `t` is in [lo, hi) (or equals `allow`): an index out of
    range would read or write outside a tensor."""
    if not t.numel():
        return
    mn, mx = _bounds(t)   # one pass; the masked pass below (and the message) only when it fails
    if mx < hi and (mn >= lo or (allow is not None and allow == lo - 1 and mn >= allow)):
        return
    vals = t if allow is None else t[t != allow]
    if vals.numel() and (vals.min().item() < lo or vals.max().item() >= hi):
        extra = f" (or {allow})" if allow is not None else ""
        raise ValueError(f"{op}: argument '{name}' has values in [{vals.min().item()}, {vals.max().item()}], "
                         f"outside the valid range [{lo}, {hi}){extra}")
