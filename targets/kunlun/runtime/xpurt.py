"""ctypes binding over the Kunlun XPU runtime (libxpurt, `xpu/runtime.h`).

Functions are bound by their real names with the argument order of the header (kunlun-driver
include/xpu/runtime.h; docs/kunlun.md, Sources, "Runtime API"); enum arguments (XPU_MEM_MAIN,
XPU_HOST_TO_DEVICE, XPUATTR_NUM_CLUSTER, ...) take their values from the installed header through
sdk_probe. Every call returns 0 or a negative XPUERR_* code; a nonzero code becomes an `XpuError`
(a runtime DeviceError) naming the call, with the code and xpu_strerror's text. The library is
only loaded by `load()`, and only when sdk.runtime_available() says it is installed.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from ctypes import POINTER, c_char_p, c_int, c_uint32, c_uint64, c_void_p

from compiler.errors import TargetError
from runtime.errors import DeviceError

from ..build import sdk, sdk_probe

# name -> argument types, in the header's order; every function returns int (0 or -XPUERR_*)
SIGNATURES = {
    "xpu_device_count": [POINTER(c_int)],
    "xpu_set_device": [c_int],
    "xpu_current_device": [POINTER(c_int)],
    "xpu_device_get_attr": [POINTER(c_uint64), c_int, c_int],          # (&v, attr, devid)
    "xpu_get_driver_version": [POINTER(c_uint32), POINTER(c_uint32)],  # (&major, &minor)
    "xpu_get_runtime_version": [POINTER(c_uint32), POINTER(c_uint32)],
    "xpu_malloc": [POINTER(c_void_p), c_uint64, c_int],                # (&ptr, size, XPU_MEM_*)
    "xpu_free": [c_void_p],
    "xpu_memcpy": [c_void_p, c_void_p, c_uint64, c_int],               # (dst, src, size, kind)
    "xpu_memcpy_async": [c_void_p, c_void_p, c_uint64, c_int, c_void_p],
    "xpu_stream_create": [POINTER(c_void_p)],
    "xpu_stream_destroy": [c_void_p],
    "xpu_wait": [c_void_p],                                            # NULL: the default stream
    "xpu_event_create": [POINTER(c_void_p)],
    "xpu_event_record": [c_void_p, c_void_p],                          # (event, stream)
    "xpu_event_destroy": [c_void_p],
    "xpu_stream_wait_event": [c_void_p, c_void_p],                     # (stream, event)
}
# in the driver's runtime.h but not in every copy of it: bound when the library exports it
OPTIONAL = {"xpu_event_wait": [c_void_p]}

# our names -> the header's enumerators
MEMCPY_KINDS = {"h2d": "XPU_HOST_TO_DEVICE", "d2h": "XPU_DEVICE_TO_HOST", "d2d": "XPU_DEVICE_TO_DEVICE"}
MEMORY_KINDS = {"main": "XPU_MEM_MAIN", "l3": "XPU_MEM_L3"}
ATTRS = {"model": "XPUATTR_MODEL", "clusters": "XPUATTR_NUM_CLUSTER", "memory": "XPUATTR_MEM_MAIN_CAPACITY"}
REQUIRED_CONSTANTS = {"XPU_MEM_MAIN", *MEMCPY_KINDS.values(), *ATTRS.values(),
                      "sizeof(XPUStream)", "sizeof(XPUEvent)"}
CONSTANTS = {n: n for n in [*MEMCPY_KINDS.values(), *MEMORY_KINDS.values(), *ATTRS.values()]} | \
    {"sizeof(XPUStream)": "sizeof(XPUStream)", "sizeof(XPUEvent)": "sizeof(XPUEvent)"}


class XpuError(DeviceError):
    """An XPU runtime call returned nonzero: `op` is the call, `code` its return value,
    `message` xpu_strerror's text."""

    def __init__(self, call: str, code: int, message: str, detail: str = ""):
        super().__init__("kunlun", code, message, op=call, detail=detail)


class SdkUnavailable(TargetError):
    """The SDK piece a binding needs is not installed; the message says what and where to point."""


def bind(lib, signatures: dict, optional: dict = None) -> set[str]:
    """Sets restype/argtypes on `lib`'s functions; returns the names of optional ones present."""
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = c_int, args
    present = set()
    for name, args in (optional or {}).items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = c_int, args
            present.add(name)
    return present


class XpuRuntime:
    """The runtime functions with Python arguments. `consts` maps enumerator names to the values
    the installed header gives them (sdk_probe); pointers and handles are ints."""

    def __init__(self, lib, consts: dict[str, int | None], path: str = ""):
        self.lib, self.consts, self.path = lib, consts, path
        self.optional = bind(lib, SIGNATURES, OPTIONAL)
        lib.xpu_strerror.restype, lib.xpu_strerror.argtypes = c_char_p, [c_int]
        ptr = ctypes.sizeof(c_void_p)
        for handle in ("XPUStream", "XPUEvent"):
            size = consts.get(f"sizeof({handle})")
            if size is not None and size != ptr:
                raise SdkUnavailable(f"{handle} is {size} bytes in the installed header, not a pointer; "
                                     "this binding passes it as void*")

    def const(self, name: str) -> int:
        value = self.consts.get(name)
        if value is None:
            raise SdkUnavailable(f"{name} is not defined by the installed xpu/runtime.h")
        return value

    def strerror(self, code: int) -> str:
        text = self.lib.xpu_strerror(code)
        return text.decode(errors="replace") if text else f"unknown XPU error {code}"

    def _call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise XpuError(name, rc, self.strerror(rc))

    # -- devices ------------------------------------------------------------------------------
    def device_count(self) -> int:
        n = c_int(0)
        self._call("xpu_device_count", ctypes.byref(n))
        return n.value

    def set_device(self, index: int) -> None:
        self._call("xpu_set_device", index)

    def current_device(self) -> int:
        d = c_int(0)
        self._call("xpu_current_device", ctypes.byref(d))
        return d.value

    def device_attr(self, attr: str, index: int) -> int:
        """`attr` is one of ATTRS ("model", "clusters", "memory")."""
        v = c_uint64(0)
        self._call("xpu_device_get_attr", ctypes.byref(v), self.const(ATTRS[attr]), index)
        return v.value

    def _version(self, call: str) -> tuple[int, int]:
        major, minor = c_uint32(0), c_uint32(0)
        self._call(call, ctypes.byref(major), ctypes.byref(minor))
        return major.value, minor.value

    def driver_version(self) -> tuple[int, int]:
        return self._version("xpu_get_driver_version")

    def runtime_version(self) -> tuple[int, int]:
        return self._version("xpu_get_runtime_version")

    # -- memory -------------------------------------------------------------------------------
    def malloc(self, nbytes: int, kind: str = "main") -> int:
        p = c_void_p(None)
        self._call("xpu_malloc", ctypes.byref(p), nbytes, self.const(MEMORY_KINDS[kind]))
        return p.value or 0

    def free(self, ptr: int) -> None:
        self._call("xpu_free", ptr)

    def memcpy(self, dst: int, src: int, nbytes: int, kind: str) -> None:
        """`kind` is "h2d", "d2h" or "d2d"."""
        self._call("xpu_memcpy", dst, src, nbytes, self.const(MEMCPY_KINDS[kind]))

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: str, stream: int | None) -> None:
        self._call("xpu_memcpy_async", dst, src, nbytes, self.const(MEMCPY_KINDS[kind]), stream)

    # -- streams and events -------------------------------------------------------------------
    def stream_create(self) -> int:
        s = c_void_p(None)
        self._call("xpu_stream_create", ctypes.byref(s))
        return s.value or 0

    def stream_destroy(self, stream: int) -> None:
        self._call("xpu_stream_destroy", stream)

    def wait(self, stream: int | None = None) -> None:
        """Blocks until everything queued on `stream` (None: the default stream) has run."""
        self._call("xpu_wait", stream)

    def event_create(self) -> int:
        e = c_void_p(None)
        self._call("xpu_event_create", ctypes.byref(e))
        return e.value or 0

    def event_record(self, event: int, stream: int | None) -> None:
        self._call("xpu_event_record", event, stream)

    def event_destroy(self, event: int) -> None:
        self._call("xpu_event_destroy", event)

    def stream_wait_event(self, stream: int | None, event: int) -> None:
        self._call("xpu_stream_wait_event", stream, event)

    def event_wait(self, event: int) -> bool:
        """Blocks on `event` when the library has xpu_event_wait; False (nothing done) otherwise."""
        if "xpu_event_wait" not in self.optional:
            return False
        self._call("xpu_event_wait", event)
        return True


def available() -> tuple[bool, str]:
    """(True, '') when libxpurt, xpu/runtime.h and a host compiler for the enum shim are present;
    otherwise (False, what is missing and which environment variable to set)."""
    return sdk.runtime_available()


_load_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _load() -> XpuRuntime:
    comp, why = sdk.find_runtime()
    if comp is None:
        raise SdkUnavailable(f"Kunlun XPU runtime binding: {why}")
    consts = sdk_probe.probe(["xpu/runtime.h"], [comp.include_dir], CONSTANTS, REQUIRED_CONSTANTS)
    # RTLD_GLOBAL: libbkcl resolves runtime symbols against this copy
    lib = ctypes.CDLL(comp.library, mode=ctypes.RTLD_GLOBAL)
    return XpuRuntime(lib, consts, comp.library)


def load() -> XpuRuntime:
    """The process-wide runtime binding (raises SdkUnavailable saying what is missing)."""
    ok, why = available()
    if not ok:
        raise SdkUnavailable(why)
    with _load_lock:
        return _load()
