"""The cpu target's device: the host as one device (memory is torch uint8 storage, copies are
torch copies, nothing is asynchronous: launches return when the kernel is done). Its streams are
runtime.stream's host streams (a worker thread each)."""
from __future__ import annotations

import errno
import os
import platform
import re

import torch

from runtime.device import Buffer, Device, DeviceProperties
from runtime.errors import OutOfMemoryError


def read_meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes ({} where there is no /proc, e.g. macOS)."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class CPUDevice(Device):
    """The host as one device: memory is torch uint8 storage, copies are torch copies, and
    nothing is asynchronous (launches return when the kernel is done)."""

    kind = "cpu"
    stream_class = "runtime.stream:Stream"     # a worker thread per stream
    event_class = "runtime.stream:Event"

    def device_count(self) -> int:
        return 1

    def _properties(self, index: int) -> DeviceProperties:
        total = read_meminfo().get("MemTotal") or _sysconf_bytes("SC_PHYS_PAGES")
        return DeviceProperties(self.target, index, _cpu_model(), self.kind, total, os.cpu_count() or 1,
                                {"machine": platform.machine()})

    def _mem_info(self, index: int) -> tuple[int, int]:
        info = read_meminfo()
        total = info.get("MemTotal") or _sysconf_bytes("SC_PHYS_PAGES")
        # MemAvailable counts reclaimable page cache, which is what an allocation can really get
        free = info.get("MemAvailable") or info.get("MemFree") or _sysconf_bytes("SC_AVPHYS_PAGES")
        return free, total

    def _malloc(self, index: int, nbytes: int):
        try:
            t = torch.empty(nbytes, dtype=torch.uint8)
        except RuntimeError as e:
            # torch's CPU allocator says "... Error code 12 (Cannot allocate memory)": keep its errno
            m = re.search(r"Error code (\d+) \(([^)]*)\)", str(e))
            code, msg = (int(m.group(1)), m.group(2)) if m else (errno.ENOMEM, os.strerror(errno.ENOMEM))
            free, total = self._mem_info(index)
            raise OutOfMemoryError(self.target, code, msg, op="malloc", request=nbytes,
                                   detail=f"{nbytes} bytes requested; {free} of {total} bytes available") from None
        return t, t.data_ptr()

    def _free(self, buf: Buffer) -> None:
        # the memory goes back when no view of it is left; dropping our reference is all we do
        buf.storage = None


def _sysconf_bytes(name: str) -> int:
    try:
        return os.sysconf(name) * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
