"""runtime.stream on the cpu target: order, handles, errors, events, shutdown, and real overlap
of kernels on two streams (ctypes releases the GIL during a launch)."""
from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import threading
import time
import traceback

import pytest
import torch

from compiler import kernel, language as tl
from runtime.stream import Event, Stream, launch, use


@kernel
def spin_kernel(x_ptr, out_ptr, n_iter, BLOCK: tl.constexpr):
    # one program (grid (1,)), a long dependent loop: a launch that keeps exactly one core busy
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for _ in range(n_iter):
        acc = acc * 0.999 + 0.001
    tl.store(out_ptr + offs, acc)


@kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def test_order_and_result():
    seen = []
    with Stream("t") as s:
        hs = [s.submit(seen.append, i) for i in range(200)]
        last = s.submit(lambda: len(seen))
        assert last.wait() == 200
    assert seen == list(range(200)) and all(h.done() for h in hs)


def test_launch_runs_kernel():
    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.zeros(1000)
    with Stream() as s:
        h = s.launch(add_kernel, (4,), x, y, out, 1000, BLOCK=256)
        assert h.wait().key                      # the CompiledKernel
    assert torch.equal(out, x + y)
    out2 = torch.zeros(1000)
    with Stream() as s, use(s):
        h = launch(add_kernel, lambda meta: (4,), x, y, out2, 1000, BLOCK=256)
    assert h.done() and torch.equal(out2, x + y)


def _fails_here():
    raise ValueError("boom")


def test_exception_reraised_with_original_traceback():
    s = Stream()
    h = s.submit(_fails_here)
    after = s.submit(lambda: "still runs")
    with pytest.raises(ValueError, match="boom") as ei:
        h.wait()
    names = [f.name for f in traceback.extract_tb(ei.value.__traceback__)]
    assert "_fails_here" in names                # the worker's frame is kept
    assert after.wait() == "still runs"          # one failure does not stop the queue
    s.synchronize()                              # already observed through wait(): not raised again
    s.close()


def test_synchronize_reraises_unobserved_failure():
    s = Stream()
    s.submit(_fails_here)
    with pytest.raises(ValueError, match="boom"):
        s.synchronize()
    s.synchronize()                              # reported once
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.submit(print)


def test_event_orders_two_streams():
    a, b = Stream("a"), Stream("b")
    flag = []
    a.submit(time.sleep, 0.2)
    a.submit(flag.append, "a-done")
    ev = Event().record(a)
    b.wait_event(ev)
    h = b.submit(lambda: list(flag))
    assert h.wait() == ["a-done"]
    assert ev.query()
    end = Event().record(b)
    assert end.elapsed_time(ev) <= 0 <= ev.elapsed_time(end)
    a.close(), b.close()


def test_context_follows_submission():
    var = contextvars.ContextVar("v", default="outer")
    with Stream() as s:
        var.set("at-submit")
        h = s.submit(var.get)
        var.set("later")
        assert h.wait() == "at-submit"


def test_no_hang_at_exit():
    code = ("import time; from runtime.stream import Stream\n"
            "s = Stream(); s.submit(time.sleep, 0.2)\n"        # pending work, never closed
            "t = Stream(); t.submit(time.sleep, 60)\n"         # stuck work: abandoned at exit
            "print('bye')\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "bye" in r.stdout, r.stderr
    assert time.monotonic() - t0 < 15


def _calibrate():
    # every n is a multiple of 16 below 2**31, so all launches share one specialisation (compiled once)
    x, out = torch.ones(16), torch.empty(16)
    n = 1 << 16
    spin_kernel[(1,)](x, out, n, BLOCK=16)                             # compile outside timing
    while True:
        t0 = time.perf_counter()
        spin_kernel[(1,)](x, out, n, BLOCK=16)
        dt = time.perf_counter() - t0
        if dt > 0.05 or n >= 1 << 30:
            break
        n *= 8
    n = min(int(n * 0.3 / dt) // 16 * 16, (1 << 31) - 16)            # ~0.3 s per launch
    return max(n, 16), x


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_two_streams_overlap():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (os.cpu_count() or 1) < 2 or cores < 2:
        pytest.skip("needs 2 cores")
    n, x = _calibrate()
    outs = [torch.empty(16), torch.empty(16)]
    one = min(_time(lambda: spin_kernel[(1,)](x, outs[0], n, BLOCK=16)) for _ in range(2))
    serial = 2 * one
    # control: two plain threads. If they do not overlap, the machine has no spare core now.
    def threads():
        ts = [threading.Thread(target=lambda o=o: spin_kernel[(1,)](x, o, n, BLOCK=16)) for o in outs]
        [t.start() for t in ts]
        [t.join() for t in ts]
    control = _time(threads)
    if control > 0.8 * serial:
        pytest.skip(f"no spare core right now: two threads took {control:.2f} s vs serial {serial:.2f} s")
    s1, s2 = Stream("s1"), Stream("s2")

    def streams():
        hs = [s1.launch(spin_kernel, (1,), x, outs[0], n, BLOCK=16),
              s2.launch(spin_kernel, (1,), x, outs[1], n, BLOCK=16)]
        [h.wait() for h in hs]
    both = min(_time(streams) for _ in range(2))
    s1.close(), s2.close()
    assert both < 0.75 * serial, (f"two streams {both:.2f} s vs serial {serial:.2f} s "
                                  f"(threads {control:.2f} s)")
