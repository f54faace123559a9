"""One device interface for every target.

`get_device("cpu")` returns the `Device` of a target: device count and properties, the current
device (per thread, as in CUDA), malloc/free, memcpy host<->device and device<->device, memory
info and synchronize. Streams and events come from `runtime.stream`, which plugs its classes into
the `Device.stream_class` / `Device.event_class` hooks; this module does not depend on it.

The backend of a target comes from its plugin (`device_backend`, a `Device` subclass or a
"module:attr" string), so a new target adds a device without an edit here; each target's device
code lives in its own package (targets/cpu/device.py, targets/gpu/device.py, targets/kunlun/runtime/).
Every failure is a `DeviceError` carrying the target's own code and message (errno values on cpu).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import threading

import torch

from compiler.errors import TargetError
from compiler.loader import LoadError, load_ref
from compiler.target import current_target, load_plugin

from .errors import DeviceError, InvalidFreeError


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    target: str
    index: int
    name: str
    kind: str                  # "cpu", "cuda", "xpu", ...
    total_memory: int          # bytes
    compute_units: int         # cores on cpu, SMs on a GPU, clusters on an XPU
    extra: dict = dataclasses.field(default_factory=dict)


class Buffer:
    """Memory returned by `Device.malloc`. `ptr` is the device address, `storage` the backend's
    own handle (a torch uint8 tensor on cpu), `freed` turns True at `Device.free`."""

    __slots__ = ("device", "index", "nbytes", "storage", "ptr", "freed")

    def __init__(self, device: Device, index: int, nbytes: int, storage, ptr: int):
        self.device, self.index, self.nbytes, self.storage, self.ptr = device, index, nbytes, storage, ptr
        self.freed = False

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return f"<Buffer {self.device.target}:{self.index} {self.nbytes} B at 0x{self.ptr:x}{state}>"

    def tensor(self, dtype: torch.dtype = torch.uint8, shape=None, offset: int = 0) -> torch.Tensor:
        """A torch view of `shape` elements of `dtype` starting `offset` bytes in (no copy)."""
        return self.device.view(self, dtype, shape, offset)


class Device:
    """The interface of one target's devices. A backend overrides the `_`-prefixed primitives;
    the public methods check arguments and turn failures into DeviceError."""

    kind = "unknown"
    # Hooks for runtime.stream (a class or a lazy "module:attr"; None: no streams on this target).
    # Called as stream_class(device=self.torch_device(index), **kwargs) and event_class(**kwargs);
    # a stream class may define synchronize_device(device, index), which synchronize() calls first.
    stream_class = None
    event_class = None

    def __init__(self, target: str):
        self.target = target
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._allocated: dict[int, int] = {}     # device index -> bytes held by live buffers

    # ---- primitives a backend implements ----
    def device_count(self) -> int:
        raise NotImplementedError

    def _properties(self, index: int) -> DeviceProperties:
        raise NotImplementedError

    def _mem_info(self, index: int) -> tuple[int, int]:
        raise NotImplementedError

    def _malloc(self, index: int, nbytes: int) -> tuple[object, int]:
        """(storage handle, address) of `nbytes` fresh bytes on device `index`."""
        raise NotImplementedError

    def _free(self, buf: Buffer) -> None:
        raise NotImplementedError

    def _device_bytes(self, buf: Buffer, offset: int, nbytes: int):
        """A byte region of `buf` that `_copy` understands (a uint8 tensor for torch-backed devices)."""
        return buf.storage[offset:offset + nbytes]

    def _copy(self, dst, src, direction: str) -> None:
        """Copies `src` into `dst` (same length). `direction` is "h2d", "d2h", "d2d" or "h2h"."""
        dst.copy_(src)

    def _synchronize(self, index: int) -> None:
        """Waits for work the device itself queued (none on cpu: launches are synchronous)."""

    def torch_device(self, index: int) -> str:
        """The torch device string of device `index` ("cpu", "cuda:1")."""
        return self.kind if self.kind == "cpu" else f"{self.kind}:{index}"

    # ---- public interface ----
    def error(self, op: str, code, message: str, detail: str = "", cls=DeviceError) -> DeviceError:
        return cls(self.target, code, message, op=op, detail=detail)

    def _index(self, device: int | None, op: str) -> int:
        if device is None:
            return self.current_device()
        n = self.device_count()
        if not isinstance(device, int) or not 0 <= device < n:
            raise self.error(op, errno.ENODEV, os.strerror(errno.ENODEV),
                             f"device {device!r} does not exist; {self.target} has {n} device(s) (0..{n - 1})")
        return device

    def current_device(self) -> int:
        return getattr(self._tls, "index", 0)

    def set_device(self, index: int) -> None:
        """Makes `index` the current device of the calling thread."""
        self._tls.index = self._index(index, "set_device")

    @contextlib.contextmanager
    def use(self, index: int):
        """`with dev.use(1): ...` runs the block with device 1 current, then restores the previous one."""
        prev = self.current_device()
        self.set_device(index)
        try:
            yield self
        finally:
            self._tls.index = prev

    def properties(self, device: int | None = None) -> DeviceProperties:
        return self._properties(self._index(device, "properties"))

    def mem_get_info(self, device: int | None = None) -> tuple[int, int]:
        """(free bytes, total bytes) of the device now."""
        return self._mem_info(self._index(device, "mem_get_info"))

    def memory_allocated(self, device: int | None = None) -> int:
        """Bytes held by live `malloc` buffers of this process."""
        return self._allocated.get(self._index(device, "memory_allocated"), 0)

    def malloc(self, nbytes: int, device: int | None = None) -> Buffer:
        index = self._index(device, "malloc")
        if not isinstance(nbytes, int) or nbytes < 0:
            raise self.error("malloc", errno.EINVAL, os.strerror(errno.EINVAL), f"size must be an int >= 0, got {nbytes!r}")
        storage, ptr = self._malloc(index, nbytes)
        with self._lock:
            self._allocated[index] = self._allocated.get(index, 0) + nbytes
        return Buffer(self, index, nbytes, storage, ptr)

    def free(self, buf: Buffer) -> None:
        if not isinstance(buf, Buffer) or buf.device is not self:
            raise self.error("free", errno.EINVAL, os.strerror(errno.EINVAL),
                             f"{buf!r} was not allocated by the {self.target} device", InvalidFreeError)
        with self._lock:
            if buf.freed:
                raise self.error("free", errno.EINVAL, os.strerror(errno.EINVAL),
                                 f"double free of {buf!r}", InvalidFreeError)
            buf.freed = True
            self._allocated[buf.index] -= buf.nbytes
        self._free(buf)

    def view(self, buf: Buffer, dtype: torch.dtype, shape, offset: int) -> torch.Tensor:
        """A torch tensor viewing `buf` (torch-backed devices only)."""
        self._live(buf, "view")
        item = torch.empty((), dtype=dtype).element_size()
        if shape is None:
            shape = ((buf.nbytes - offset) // item,)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = 1
        for s in shape:
            count *= s
        if offset < 0 or offset % item or offset + count * item > buf.nbytes:
            raise self.error("view", errno.EINVAL, os.strerror(errno.EINVAL),
                             f"{count} x {dtype} at offset {offset} does not fit in {buf!r} "
                             f"(or the offset is not a multiple of {item})")
        return buf.storage[offset:offset + count * item].view(dtype).view(shape)

    def _live(self, buf: Buffer, op: str) -> None:
        if buf.freed:
            raise self.error(op, errno.EFAULT, os.strerror(errno.EFAULT), f"use of {buf!r} after free")

    def _endpoint(self, obj, offset: int, nbytes: int | None, op: str, writable: bool):
        """(side, byte region, length) of one memcpy argument."""
        if isinstance(obj, Buffer):
            if obj.device is not self:
                raise self.error(op, errno.EXDEV, os.strerror(errno.EXDEV),
                                 f"{obj!r} belongs to target '{obj.device.target}'; copy through the host")
            self._live(obj, op)
            size, side = obj.nbytes, "d"
        else:
            if isinstance(obj, (bytes, bytearray, memoryview)):
                if writable and (isinstance(obj, bytes) or (isinstance(obj, memoryview) and obj.readonly)):
                    raise self.error(op, errno.EINVAL, os.strerror(errno.EINVAL), "the destination is read-only bytes")
                obj = torch.frombuffer(bytearray(obj) if isinstance(obj, bytes) else obj, dtype=torch.uint8) \
                    if len(obj) else torch.empty(0, dtype=torch.uint8)
            if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu" or not obj.is_contiguous():
                raise self.error(op, errno.EINVAL, os.strerror(errno.EINVAL),
                                 f"a host argument must be a contiguous CPU tensor or a bytes-like object, got "
                                 f"{type(obj).__name__}" + (f" on {obj.device}" if isinstance(obj, torch.Tensor) else ""))
            obj = obj.reshape(-1).view(torch.uint8)
            size, side = obj.numel(), "h"
        n = size - offset if nbytes is None else nbytes
        if offset < 0 or n < 0 or offset + n > size:
            raise self.error(op, errno.EINVAL, os.strerror(errno.EINVAL),
                             f"{n} bytes at offset {offset} overflow a {'destination' if writable else 'source'} "
                             f"of {size} bytes")
        region = self._device_bytes(obj, offset, n) if side == "d" else obj[offset:offset + n]
        return side, region, n

    def memcpy(self, dst, src, nbytes: int | None = None, *, dst_offset: int = 0, src_offset: int = 0) -> None:
        """Copies `nbytes` (default: all of `src` after `src_offset`) from `src` to `dst`. A `Buffer`
        is device memory; a CPU tensor or bytes-like object is host memory; the direction follows."""
        if nbytes is None:
            nbytes = self._endpoint(src, src_offset, None, "memcpy", False)[2]
        s_side, s_region, _ = self._endpoint(src, src_offset, nbytes, "memcpy", False)
        d_side, d_region, _ = self._endpoint(dst, dst_offset, nbytes, "memcpy", True)
        if nbytes:
            self._copy(d_region, s_region, f"{s_side}2{d_side}")

    def synchronize(self, device: int | None = None) -> None:
        """Waits for everything queued on the device: streams first (through the runtime.stream
        hook, when installed), then the device itself."""
        index = self._index(device, "synchronize")
        cls = self._hook("stream_class", "synchronize", required=False)
        sync_streams = getattr(cls, "synchronize_device", None)
        if sync_streams is not None:
            sync_streams(self, index)
        self._synchronize(index)

    def stream(self, device: int | None = None, **kwargs):
        """A new stream on device `device` (runtime.stream's class for this target)."""
        index = self._index(device, "stream")
        return self._hook("stream_class", "stream")(device=self.torch_device(index), **kwargs)

    def event(self, **kwargs):
        """A new event (runtime.stream's class for this target)."""
        return self._hook("event_class", "event")(**kwargs)

    def _hook(self, attr: str, op: str, required: bool = True):
        ref = getattr(self, attr)             # stream_class or event_class
        if isinstance(ref, str):
            try:
                ref = load_ref(ref, f"{attr} of target '{self.target}'")
            except LoadError as e:
                if not required:
                    return None
                raise self.error(op, errno.ENOSYS, os.strerror(errno.ENOSYS), str(e)) from None
            setattr(self, attr, ref)          # resolved once, on this instance
        if ref is None and required:
            raise self.error(op, errno.ENOSYS, os.strerror(errno.ENOSYS),
                             f"target '{self.target}' has no {op} support (its device backend sets no {attr})")
        return ref

    def __repr__(self) -> str:
        return f"<{type(self).__name__} target={self.target} devices={self.device_count()}>"


# ---- registry: target name -> backend ----
_backends: dict[str, object] = {}        # name -> Device subclass or "module:attr"
_devices: dict[str, Device] = {}
_reg_lock = threading.Lock()


def register_device_backend(target: str, backend) -> None:
    """Registers a `Device` subclass (or "module:attr") for `target`. The same backend twice is
    harmless; another one replaces it (and the instance already made, if any)."""
    with _reg_lock:
        if _backends.get(target) == backend:
            return
        _backends[target] = backend
        _devices.pop(target, None)


def _resolve(target: str, ref):
    try:
        ref = load_ref(ref, "device backend")
    except LoadError as e:
        raise DeviceError(target, errno.ENOENT, os.strerror(errno.ENOENT), op="get_device", detail=str(e)) from None
    if not (isinstance(ref, type) and issubclass(ref, Device)):
        raise DeviceError(target, errno.EINVAL, os.strerror(errno.EINVAL), op="get_device",
                          detail=f"device backend {ref!r} is not a runtime.device.Device subclass")
    return ref


def get_device(target: str | None = None) -> Device:
    """The Device of `target` ("cpu", "toy", a "name:variant" uses name); default: the current
    target. Backends registered here win; otherwise the target plugin's `device_backend`."""
    if target is None:
        target = current_target().name
    name = target.partition(":")[0]
    dev = _devices.get(name)
    if dev is not None:
        return dev
    ref = _backends.get(name)
    if ref is None:
        try:
            ref = load_plugin(name).device_backend
        except TargetError as e:
            raise DeviceError(name, errno.ENODEV, os.strerror(errno.ENODEV), op="get_device", detail=str(e)) from None
        if ref is None:
            raise DeviceError(name, errno.ENOSYS, os.strerror(errno.ENOSYS), op="get_device",
                              detail=f"target plugin '{name}' declares no device_backend")
    cls = _resolve(name, ref)
    with _reg_lock:
        return _devices.setdefault(name, cls(name))


def device_backends() -> dict[str, object]:
    """Backends registered explicitly (plugin-provided ones are found on demand)."""
    return dict(_backends)
