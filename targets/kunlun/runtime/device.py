"""The kunlun target's devices through the XPU runtime binding (xpurt.py).

Used as the plugin's device backend only when the SDK is installed (targets/kunlun/__init__.py);
without it the target runs under host emulation and its device is the host (`CPUDevice`).
Device memory is not host-addressable: a `Buffer`'s storage is its device address, copies go
through xpu_memcpy, and `Buffer.tensor()` is refused. Nothing here has run on a Kunlun device.
"""
from __future__ import annotations

import errno
import os
from typing import NamedTuple

import torch

from runtime.device import Buffer, Device, DeviceProperties
from runtime.errors import DeviceError

from . import xpurt

# XPUATTR_MODEL ranges (reference: "Model ids: 2..299 are KL2, 300..599 KL3")
_GENERATIONS = ((2, 300, "KL2"), (300, 600, "KL3"))


class _Region(NamedTuple):
    """A byte range of device memory, as `_copy` receives it."""
    index: int
    addr: int
    nbytes: int


def generation(model: int) -> str:
    return next((name for lo, hi, name in _GENERATIONS if lo <= model < hi), "unknown")


class KunlunDevice(Device):
    kind = "xpu"
    stream_class = "targets.kunlun.xpu_stream:XpuStream"
    event_class = "targets.kunlun.xpu_stream:XpuEvent"

    def __init__(self, target: str):
        super().__init__(target)
        self._count = None
        try:
            self.rt = xpurt.load()
        except xpurt.SdkUnavailable as e:
            raise DeviceError(target, errno.ENODEV, os.strerror(errno.ENODEV), op="get_device",
                              detail=str(e)) from None

    def _on(self, index: int):
        # the runtime's current device is per thread; set it before every call that depends on it
        self.rt.set_device(index)
        return self.rt

    def device_count(self) -> int:
        # fixed for the process (XPU_VISIBLE_DEVICES is read at start); every call checks an index
        if self._count is None:
            self._count = self.rt.device_count()
        return self._count

    def torch_device(self, index: int) -> str:
        # torch has no Kunlun device type; this only names the device for the stream class
        return f"kunlun:{index}"

    def _properties(self, index: int) -> DeviceProperties:
        rt = self.rt
        model = rt.device_attr("model", index)
        major, minor = rt.runtime_version()
        dmajor, dminor = rt.driver_version()
        extra = {"model": model, "runtime": f"{major}.{minor}", "driver": f"{dmajor}.{dminor}"}
        return DeviceProperties(self.target, index, f"Kunlun {generation(model)} (model {model})", self.kind,
                                rt.device_attr("memory", index), rt.device_attr("clusters", index), extra)

    def _mem_info(self, index: int) -> tuple[int, int]:
        # the runtime API (docs/kunlun.md, Sources) has no free-memory query: free is the capacity minus
        # what this process holds, an upper bound when other processes share the device
        total = self.rt.device_attr("memory", index)
        return max(total - self._allocated.get(index, 0), 0), total

    def _malloc(self, index: int, nbytes: int):
        if nbytes == 0:
            return None, 0
        ptr = self._on(index).malloc(nbytes, "main")
        return ptr, ptr

    def _free(self, buf: Buffer) -> None:
        if buf.ptr:
            self._on(buf.index).free(buf.ptr)
        buf.storage = None

    def view(self, buf: Buffer, dtype: torch.dtype, shape, offset: int) -> torch.Tensor:
        raise self.error("view", errno.ENOSYS, os.strerror(errno.ENOSYS),
                         "Kunlun device memory is not addressable from the host; memcpy it to a host tensor")

    def _device_bytes(self, buf: Buffer, offset: int, nbytes: int) -> _Region:
        return _Region(buf.index, buf.ptr + offset, nbytes)

    def _copy(self, dst, src, direction: str) -> None:
        if direction == "h2h":
            dst.copy_(src)
        elif direction == "h2d":
            self._on(dst.index).memcpy(dst.addr, src.data_ptr(), dst.nbytes, "h2d")
        elif direction == "d2h":
            self._on(src.index).memcpy(dst.data_ptr(), src.addr, src.nbytes, "d2h")
        elif dst.index == src.index:
            self._on(dst.index).memcpy(dst.addr, src.addr, dst.nbytes, "d2d")
        else:
            # between two devices: through the host (the runtime API has no peer copy)
            host = torch.empty(src.nbytes, dtype=torch.uint8)
            self._on(src.index).memcpy(host.data_ptr(), src.addr, src.nbytes, "d2h")
            self._on(dst.index).memcpy(dst.addr, host.data_ptr(), dst.nbytes, "h2d")

    def _synchronize(self, index: int) -> None:
        self._on(index).wait(None)          # the default stream; streams are waited through the hook
