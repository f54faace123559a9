"""Streams and events: ordered queues of launches, with events between queues.

On the cpu target a `Stream` is one worker thread that runs the callables submitted to it, in
submission order. A tilejit launch on the cpu target is a ctypes call, and ctypes releases the GIL
for the call, so kernels submitted to two streams really run at the same time on two cores (and a
collective waited on in a stream overlaps a kernel in another: torch.distributed also releases the
GIL while it waits).

    s = Stream("compute")
    h = s.launch(add_kernel, (n_blocks,), x, y, out, n, BLOCK=256)   # returns at once
    ev = Event().record(s)          # marks "everything submitted to s so far"
    comm.wait_event(ev)             # comm's later work starts only after that point
    h.wait()                        # the launch's result (the CompiledKernel), or its exception

Nothing is done until waited on: `Handle.wait()`, `Event.synchronize()` or `Stream.synchronize()`.
An exception raised by submitted work is re-raised by `wait()` with its original traceback; a
failure nobody waited on is re-raised by the next `Stream.synchronize()`, so it is never lost.

Each submission runs in a copy of the submitter's `contextvars` context, so `use_target(...)` and
`compiler.numerics(...)` in force at submit time apply to the launch on the worker thread.

On a CUDA device (`Stream(device="cuda")`) the same interface wraps `torch.cuda.Stream` and
`torch.cuda.Event` (`CudaStream`): work is enqueued from the calling thread under
`torch.cuda.stream(...)` and the handle is a recorded CUDA event. That wrapper is deliberately
thin and is not exercised by the test suite (no GPU here).
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import itertools
import queue
import threading
import time
import weakref

__all__ = ["Handle", "StreamScope", "Stream", "Event", "use", "current_stream", "launch"]

_STOP = object()                       # sentinel that ends a worker thread
_live_streams: "weakref.WeakSet[Stream]" = weakref.WeakSet()
_ids = itertools.count()


class Handle:
    """The result of one asynchronous call. `wait()` blocks until it ran and returns its value or
    re-raises its exception (the traceback still points at the failing line in the worker)."""

    __slots__ = ("_done", "_value", "_exc", "_observed", "finished_at", "name")

    def __init__(self, name: str = ""):
        self._done = threading.Event()
        self._value = None
        self._exc: BaseException | None = None
        self._observed = False      # True once someone received the exception
        self.finished_at: float | None = None
        self.name = name

    def _finish(self, value=None, exc: BaseException | None = None) -> None:
        self._value, self._exc = value, exc
        self.finished_at = time.perf_counter()
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None):
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.name or 'async call'} did not finish within {timeout} s")
        if self._exc is not None:
            self._observed = True
            # `raise exc` keeps exc.__traceback__ (the worker's frames) and appends this frame
            raise self._exc
        return self._value

    def __repr__(self):
        state = "pending" if not self.done() else ("failed" if self._exc else "done")
        return f"<Handle {self.name} {state}>"


class StreamScope:
    """`with stream:` waits for the stream's work on a clean exit and always closes it; shared by
    every stream kind (host, CUDA, XPU), which provide synchronize() and close()."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.synchronize()
        finally:
            self.close()


class Stream(StreamScope):
    """An ordered queue of work run by one daemon worker thread: the host's stream (the cpu target's,
    and the kunlun target's under host emulation). Devices with streams of their own give theirs
    through `get_device(target).stream()` (targets/gpu/stream.py, targets/kunlun/runtime/stream.py)."""

    def __init__(self, name: str | None = None, device: str = "cpu"):
        self.name = name or f"stream{next(_ids)}"
        self.device = "cpu"
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._last: Handle | None = None
        self._first_error: Handle | None = None
        self._closed = False
        # daemon: a stream that was never closed cannot keep the interpreter alive at exit
        self._thread = threading.Thread(target=self._run, name=f"tilejit-{self.name}", daemon=True)
        self._thread.start()
        _live_streams.add(self)

    # -- the worker ---------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is _STOP:
                return
            handle, ctx, fn, args, kwargs = item
            try:
                value = ctx.run(fn, *args, **kwargs)
            except BaseException as e:          # noqa: BLE001 - handed to the waiter, not swallowed
                with self._lock:
                    if self._first_error is None:
                        self._first_error = handle
                handle._finish(exc=e)
            else:
                handle._finish(value)

    # -- submission ---------------------------------------------------------------------------
    def submit(self, fn, *args, **kwargs) -> Handle:
        """Queues `fn(*args, **kwargs)` after everything submitted before; returns at once."""
        handle = Handle(f"{getattr(fn, '__name__', 'call')} on {self.name}")
        with self._lock:
            if self._closed:
                raise RuntimeError(f"stream {self.name} is closed")
            self._last = handle
            self._q.put((handle, contextvars.copy_context(), fn, args, kwargs))
        return handle

    def launch(self, kfn, grid, *args, **kwargs) -> Handle:
        """Queues the tilejit launch `kfn[grid](*args, **kwargs)`; the handle yields the CompiledKernel."""
        return self.submit(kfn.run, grid, args, kwargs)

    def wait_event(self, event: "Event") -> None:
        """Work submitted after this call starts only once `event` has completed."""
        if event._handle is None:
            return      # an event never recorded is complete, as in CUDA
        h = event._handle
        # waits for completion whether or not the recorded work failed: an event marks a point
        # in a queue, it does not carry errors (the failing handle or synchronize() reports them)
        self.submit(h._done.wait)

    def synchronize(self) -> None:
        """Blocks until everything submitted so far ran; re-raises the first failure nobody saw."""
        with self._lock:
            last = self._last
        if last is not None:
            last._done.wait()
        with self._lock:
            err, self._first_error = self._first_error, None
        if err is not None and not err._observed:
            err._observed = True
            raise err._exc

    def query(self) -> bool:
        """True if everything submitted so far has run."""
        with self._lock:
            return self._last is None or self._last.done()

    # -- lifetime -----------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Runs what is queued, then stops the worker. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._q.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __repr__(self):
        return f"<Stream {self.name} ({self.device})>"


class Event:
    """A point in a stream. `record(stream)` marks everything submitted to it so far;
    `stream.wait_event(ev)` orders another stream after that point; `synchronize()` waits on the host."""

    def __init__(self):
        self._handle: Handle | None = None

    def record(self, stream: Stream) -> "Event":
        self._handle = stream.submit(_noop)
        self._handle.name = f"event on {stream.name}"
        return self

    def query(self) -> bool:
        return self._handle is None or self._handle.done()

    done = query

    def synchronize(self) -> None:
        if self._handle is not None:
            self._handle._done.wait()

    wait = synchronize

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds between this event and `end` (both completed)."""
        self.synchronize()
        end.synchronize()
        return (end._handle.finished_at - self._handle.finished_at) * 1e3


def _noop():
    return None


# -- the current stream (optional sugar) ------------------------------------------------------
_current: contextvars.ContextVar = contextvars.ContextVar("tilejit_stream", default=None)


@contextlib.contextmanager
def use(stream: Stream | None):
    """`with use(s): launch(kfn, grid, ...)` sends module-level `launch` calls to `s`."""
    token = _current.set(stream)
    try:
        yield stream
    finally:
        _current.reset(token)


def current_stream() -> Stream | None:
    return _current.get()


def launch(kfn, grid, *args, **kwargs):
    """A launch on the current stream (a Handle), or on the calling thread when there is none
    (then the launch is synchronous and its CompiledKernel is returned)."""
    s = _current.get()
    if s is None:
        return kfn.run(grid, args, kwargs)
    return s.launch(kfn, grid, *args, **kwargs)


@atexit.register
def _close_all() -> None:
    # stop workers before interpreter teardown; a worker stuck in a long call is a daemon thread
    # and is abandoned rather than joined, so exit never hangs
    for s in list(_live_streams):
        s.close(timeout=1.0)
