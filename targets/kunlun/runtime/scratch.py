"""GM scratch workspaces (the memory plan's lowest tier, targets/kunlun/plan/scratch.py): one
buffer per kernel launcher, one slot per core, taken when the launcher is made and reused by
every launch of it. A launcher runs one launch at a time (its lock), so launches on several
streams never share a slot while it is in use. Under host emulation the buffer is host memory;
`stats()` lists what is held now."""
from __future__ import annotations

import threading
import weakref

import torch

_lock = threading.Lock()
_held: dict[int, tuple[str, int]] = {}   # a key per buffer -> (kernel, bytes)
_next = [0]


def workspace(kernel: str, nbytes: int) -> torch.Tensor:
    buf = torch.empty(nbytes, dtype=torch.uint8)
    with _lock:
        key = _next[0] = _next[0] + 1
        _held[key] = (kernel, nbytes)
    weakref.finalize(buf, _drop, key)
    return buf


def _drop(key: int) -> None:
    with _lock:
        _held.pop(key, None)


def stats() -> dict:
    """{"workspaces": n, "bytes": total, "kernels": {kernel: bytes}} of the workspaces held now."""
    with _lock:
        kernels: dict[str, int] = {}
        for k, n in _held.values():
            kernels[k] = kernels.get(k, 0) + n
        return {"workspaces": len(_held), "bytes": sum(kernels.values()), "kernels": kernels}
