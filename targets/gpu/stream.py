"""The gpu target's streams and events: thin wrappers of torch.cuda's behind runtime.stream's
interface (the device backend names them: device.py). Untested here (no GPU)."""
from __future__ import annotations

import itertools

import torch

from runtime.stream import Handle, StreamScope

_ids = itertools.count()


class CudaStream(StreamScope):
    """`torch.cuda.Stream` behind the runtime's stream interface. Work is enqueued from the calling
    thread inside `torch.cuda.stream(s)`; the handle waits on a CUDA event recorded after it.
    Untested here (no GPU); kept minimal on purpose."""

    def __init__(self, name: str | None = None, device: str = "cuda"):
        self.name = name or f"cuda-stream{next(_ids)}"
        self.device = device
        self._s = torch.cuda.Stream(device=device)

    def launch(self, kfn, grid, *args, **kwargs) -> Handle:
        """An asynchronous `kfn[grid](*args, **kwargs)` on this stream."""
        return self.submit(kfn.run, grid, args, kwargs)

    def submit(self, fn, *args, **kwargs) -> Handle:
        with torch.cuda.stream(self._s):
            value = fn(*args, **kwargs)
            ev = torch.cuda.Event()
            ev.record(self._s)
        return _CudaHandle(ev, value, f"{getattr(fn, '__name__', 'call')} on {self.name}")

    def wait_event(self, event: "CudaEvent") -> None:
        self._s.wait_event(event._ev)

    def synchronize(self) -> None:
        self._s.synchronize()

    def query(self) -> bool:
        return self._s.query()

    def close(self, timeout=None) -> None:
        pass


class _CudaHandle(Handle):
    __slots__ = ("_ev",)

    def __init__(self, ev, value, name):
        super().__init__(name)
        self._ev, self._value = ev, value

    def done(self) -> bool:
        return self._ev.query()

    def wait(self, timeout=None):
        self._ev.synchronize()
        return self._value


class CudaEvent:
    """A point in a CudaStream: a recorded `torch.cuda.Event`."""

    def __init__(self):
        self._ev = torch.cuda.Event(enable_timing=True)

    def record(self, stream: CudaStream) -> "CudaEvent":
        self._ev.record(stream._s)
        return self

    def query(self) -> bool:
        return self._ev.query()

    done = query

    def synchronize(self) -> None:
        self._ev.synchronize()

    wait = synchronize

    def elapsed_time(self, end: "CudaEvent") -> float:
        """Milliseconds between this event and `end` (both completed)."""
        return self._ev.elapsed_time(end._ev)
