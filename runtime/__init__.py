"""tilejit runtime: devices, the memory pool and the KV-cache planner (this package), streams and
events (`runtime.stream`), collectives (`runtime.collectives`). See docs/runtime.md.

Submodules are imported on first use, so `import runtime` stays cheap and a missing optional
piece (streams, collectives) does not break the others."""
from __future__ import annotations

import importlib

from .errors import DeviceError, InvalidFreeError, KVCachePlanError, OutOfMemoryError

__tilejit__ = True   # tells tilejit's packages from others of the same name (compiler/names.py)

_LAZY = {
    "Device": "device", "DeviceProperties": "device", "Buffer": "device",
    "get_device": "device", "register_device_backend": "device",
    "MemoryPool": "memory", "Block": "memory", "PoolStats": "memory", "KVCachePlan": "memory",
    "plan_kv_cache": "memory", "free_memory_now": "memory",
    "Stream": "stream", "Event": "stream", "Handle": "stream", "use": "stream",
    "current_stream": "stream", "launch": "stream",
    "ParallelLayout": "layout", "LayoutError": "layout",
    "Communicator": "collectives", "CommHandle": "collectives", "CollectiveError": "collectives",
    "CollectiveTimeout": "collectives", "BackendUnavailable": "collectives", "run_ranks": "collectives",
}

__all__ = ["DeviceError", "InvalidFreeError", "KVCachePlanError", "OutOfMemoryError", *_LAZY]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{mod}", __name__), name)
