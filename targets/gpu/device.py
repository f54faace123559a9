"""The gpu target's devices: CUDA (or ROCm) GPUs through torch.cuda.

Memory is torch uint8 storage on the GPU, copies are torch copies (any direction), streams and
events are stream.py's CudaStream / CudaEvent. On a machine without a GPU `device_count()` is 0 and every
operation on a device raises DeviceError(ENODEV) naming the target; nothing else here has run on
a GPU yet (see docs/runtime.md).
"""
from __future__ import annotations

import errno

import torch

from runtime.device import Device, DeviceProperties
from runtime.errors import OutOfMemoryError


class CUDADevice(Device):
    kind = "cuda"
    stream_class = "targets.gpu.stream:CudaStream"
    event_class = "targets.gpu.stream:CudaEvent"

    def device_count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def _properties(self, index: int) -> DeviceProperties:
        p = torch.cuda.get_device_properties(index)
        return DeviceProperties(self.target, index, p.name, self.kind, p.total_memory, p.multi_processor_count,
                                {"capability": f"{p.major}.{p.minor}"})

    def _mem_info(self, index: int) -> tuple[int, int]:
        return torch.cuda.mem_get_info(index)

    def _malloc(self, index: int, nbytes: int):
        try:
            t = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
        except torch.cuda.OutOfMemoryError as e:
            free, total = self._mem_info(index)
            raise OutOfMemoryError(self.target, errno.ENOMEM, str(e).splitlines()[0], op="malloc", request=nbytes,
                                   detail=f"{nbytes} bytes requested; {free} of {total} bytes free") from None
        return t, t.data_ptr()

    def _free(self, buf) -> None:
        buf.storage = None   # torch's caching allocator takes the memory back with the last view

    def _synchronize(self, index: int) -> None:
        torch.cuda.synchronize(index)
