"""runtime.stream on the cpu target: order, handles, errors, events, shutdown, and real overlap
of kernels on two streams (ctypes releases the GIL during a launch)."""
from __future__ import annotations

import contextvars
import subprocess
import sys
import time
import traceback

import pytest
import torch

from compiler import kernel, language as tl
from runtime.stream import Event, Stream, launch, use

from flag_kernels import PATIENCE, compile_both, set_flag, wait_for_flag  # tests/ is on sys.path (conftest.py lives there)

pytestmark = pytest.mark.no_toolchain


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


@pytest.mark.compile
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


@pytest.mark.integration
def test_no_hang_at_exit():
    code = ("import time; from runtime.stream import Stream\n"
            "s = Stream(); s.submit(time.sleep, 0.2)\n"        # pending work, never closed
            "t = Stream(); t.submit(time.sleep, 60)\n"         # stuck work: abandoned at exit
            "print('bye')\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "bye" in r.stdout, r.stderr
    assert time.monotonic() - t0 < 15


@pytest.mark.compile
def test_two_streams_overlap():
    """A kernel on s1 spins until a kernel launched after it on s2 sets a flag: it sees the flag
    only if the two launches run at the same time (ctypes and the compiled launcher release the
    GIL); run one after the other, it gives up after `limit` reads (seconds) and stores 0. The OS
    interleaves the two threads even on one free core, so this holds under load too."""
    flag, out = torch.zeros(1, dtype=torch.int32), torch.full((1,), -1, dtype=torch.int32)
    compile_both()
    s1, s2 = Stream("s1"), Stream("s2")
    try:
        waiting = s1.launch(wait_for_flag, (1,), flag, torch.zeros(1, dtype=torch.int32), out, PATIENCE)
        setting = s2.launch(set_flag, (1,), flag)
        setting.wait(), waiting.wait()
    finally:
        s1.close(), s2.close()
    assert out.item() == 1, "the kernel on s1 never saw s2's flag: the streams ran one after the other"
