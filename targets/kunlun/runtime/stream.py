"""XPU streams and events behind runtime.stream's interface (the KunlunDevice stream hooks).

Like runtime.stream's CudaStream, work is enqueued from the calling thread: `submit(fn)` runs
`fn` with this stream current (`current_stream()` gives its XPUStream handle to code that enqueues
async work), then records an XPU event; the handle's `wait()` waits for that event
(xpu_event_wait when the library exports it, else xpu_wait on the whole stream). The runtime
API its public callers use (docs/kunlun.md, Sources) has no query or timing calls, so `query()`
and `elapsed_time()` are refused.
Nothing here has run on a Kunlun device.
"""
from __future__ import annotations

import contextvars
import errno
import itertools
import os
import threading
import weakref

from runtime.errors import DeviceError
from runtime.stream import Handle, StreamScope

from . import xpurt

_current: contextvars.ContextVar = contextvars.ContextVar("tilejit_xpu_stream", default=None)
_ids = itertools.count()


def current_stream() -> "XpuStream | None":
    """The XpuStream whose submit() is running on this thread, if any."""
    return _current.get()


def _unsupported(op: str, what: str) -> DeviceError:
    return DeviceError("kunlun", errno.ENOSYS, os.strerror(errno.ENOSYS), op=op,
                       detail=f"{what} is not in the XPU runtime API this binding uses")


def _index(device) -> int:
    text = str(device)
    return int(text.rpartition(":")[2]) if ":" in text else 0


class XpuStream(StreamScope):
    _live: "weakref.WeakSet[XpuStream]" = weakref.WeakSet()

    def __init__(self, name: str | None = None, device: str = "kunlun:0"):
        self.name = name or f"xpu-stream{next(_ids)}"
        self.device, self.index = str(device), _index(device)
        self.rt = xpurt.load()
        self.rt.set_device(self.index)
        self.handle = self.rt.stream_create()
        self._lock = threading.Lock()
        XpuStream._live.add(self)

    def submit(self, fn, *args, **kwargs) -> Handle:
        """Runs fn now with this stream current; the handle waits for the work it enqueued."""
        token = _current.set(self)
        try:
            value = fn(*args, **kwargs)
        finally:
            _current.reset(token)
        return _XpuHandle(XpuEvent().record(self), value, f"{getattr(fn, '__name__', 'call')} on {self.name}")

    def launch(self, kfn, grid, *args, **kwargs) -> Handle:
        return self.submit(kfn.run, grid, args, kwargs)

    def wait_event(self, event: "XpuEvent") -> None:
        if event.handle is not None:
            self.rt.stream_wait_event(self.handle, event.handle)

    def synchronize(self) -> None:
        self.rt.set_device(self.index)
        self.rt.wait(self.handle)

    def query(self) -> bool:
        raise _unsupported("stream query", "a non-blocking stream query")

    def close(self, timeout=None) -> None:
        with self._lock:
            handle, self.handle = self.handle, None
        if handle:
            self.rt.set_device(self.index)
            self.rt.stream_destroy(handle)

    @classmethod
    def synchronize_device(cls, device, index: int) -> None:
        """Device.synchronize's hook: waits for every open stream of device `index`."""
        for s in list(cls._live):
            if s.index == index and s.handle:
                s.synchronize()

    def __repr__(self):
        return f"<XpuStream {self.name} ({self.device})>"


class XpuEvent:
    def __init__(self):
        self.handle = None
        self._stream: XpuStream | None = None
        self._rt = None

    def record(self, stream: XpuStream) -> "XpuEvent":
        self._rt = stream.rt
        if self.handle is None:
            stream.rt.set_device(stream.index)
            self.handle = stream.rt.event_create()
        stream.rt.event_record(self.handle, stream.handle)
        self._stream = stream
        return self

    def synchronize(self) -> None:
        if self.handle is None:
            return          # never recorded: complete
        if not self._rt.event_wait(self.handle):
            self._stream.synchronize()      # no xpu_event_wait: waits for later work on the stream too

    wait = synchronize

    def query(self) -> bool:
        raise _unsupported("event query", "a non-blocking event query")

    done = query

    def elapsed_time(self, end: "XpuEvent") -> float:
        raise _unsupported("event elapsed_time", "event timing")

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle:
            self._rt.event_destroy(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter teardown or a dead context: nothing to do
            pass


class _XpuHandle(Handle):
    __slots__ = ("_ev",)

    def __init__(self, ev: XpuEvent, value, name: str):
        super().__init__(name)
        self._ev, self._value = ev, value

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None):
        if not self._done.is_set():
            if timeout is None:
                self._ev.synchronize()
            else:
                # the runtime's waits have no deadline: wait on a helper thread, which keeps
                # waiting in the background if the deadline passes
                failure = []

                def run():
                    try:
                        self._ev.synchronize()
                    except BaseException as e:  # noqa: BLE001 - re-raised on the waiting thread
                        failure.append(e)
                t = threading.Thread(target=run, daemon=True)
                t.start()
                t.join(timeout)
                if t.is_alive():
                    raise TimeoutError(f"{self.name} did not finish within {timeout} s")
                if failure:
                    raise failure[0]
            self._ev.close()
            self._done.set()
        return self._value
