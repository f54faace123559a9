"""User-facing errors: what a kernel author sees for code outside the tile language, for a
wrongly shaped program, and for a launch that does not fit the kernel.

- ``CompilationError``: str() names this file, the line number and the offending source line;
  the kernels are plain functions here, and both decoration and launch are inside
  ``pytest.raises`` (a compiler may reject at either point).
- ``KernelArgumentError`` (a TypeError / ValueError): names the kernel and the argument.
- Neither leaks the compiler's own file paths (a traceback through compiler/frontend.py etc.).
"""

from __future__ import annotations

import inspect
import os
import re
import types

import pytest
import torch

import compiler
from compiler import CompilationError, KernelArgumentError, kernel, language as tl

pytestmark = pytest.mark.no_toolchain

THIS_FILE = os.path.abspath(__file__)


# --------------------------------------------------------------------------------------------
# kernels that must not compile (each marks the offending line with a unique snippet)
# --------------------------------------------------------------------------------------------
def loop_exit_kernel(out_ptr, n):
    i = 0
    while i < n:
        i += 1
        break
    tl.store(out_ptr, i)


def tensor_if_kernel(x_ptr, out_ptr):
    v = tl.load(x_ptr + tl.arange(0, 4))
    if v > 0:
        tl.store(out_ptr, 1.0)


def shape_mismatch_kernel(out_ptr):
    a = tl.arange(0, 16)
    b = tl.arange(0, 32)
    c = a + b
    tl.store(out_ptr + tl.arange(0, 16), c)


def runtime_arange_kernel(out_ptr, n):
    offs = tl.arange(0, n)
    tl.store(out_ptr + offs, offs)


def unsupported_call_kernel(out_ptr):
    tl.store(out_ptr, tl.sort(tl.arange(0, 4)))


def _bad_helper(x):
    y = tl.arange(0, 8)
    return x + y


def bad_helper_caller_kernel(out_ptr):
    x = tl.arange(0, 16)
    tl.store(out_ptr + x, _bad_helper(x))


# (kernel, snippet on the offending line, launch args)
COMPILE_ERRORS = [
    (loop_exit_kernel, "break", lambda: (torch.zeros(1, dtype=torch.int32), 4)),
    (tensor_if_kernel, "if v > 0:", lambda: (torch.ones(4), torch.zeros(1))),
    (shape_mismatch_kernel, "c = a + b", lambda: (torch.zeros(16, dtype=torch.int32),)),
    (runtime_arange_kernel, "offs = tl.arange(0, n)", lambda: (torch.zeros(16, dtype=torch.int32), 16)),
    (unsupported_call_kernel, "tl.sort(tl.arange(0, 4))", lambda: (torch.zeros(1, dtype=torch.int32),)),
]


def _line_of(fn, snippet):
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if snippet in line]
    assert len(hits) == 1, f"snippet {snippet!r} must occur once in {fn.__name__}"
    return hits[0]


def _assert_no_internal_paths(msg):
    assert not re.search(r"compiler[/\\][\w/\\]*\.py", msg), f"compiler-internal path in message:\n{msg}"
    assert not re.search(r"targets[/\\][\w/\\]*\.py", msg), f"target-internal path in message:\n{msg}"
    assert "Traceback" not in msg, msg


def _assert_location(msg, path, lineno, snippet):
    rel = os.path.relpath(path)
    assert path in msg or rel in msg, f"file path {path!r} not in message:\n{msg}"
    assert re.search(rf"(:|line ){lineno}\b", msg), f"line number {lineno} not in message:\n{msg}"
    assert snippet in msg, f"offending source line {snippet!r} not in message:\n{msg}"


@pytest.mark.parametrize("fn, snippet, make_args", COMPILE_ERRORS,
                         ids=[c[0].__name__ for c in COMPILE_ERRORS])
def test_compilation_error_points_at_user_line(fn, snippet, make_args):
    with pytest.raises(CompilationError) as info:
        k = kernel(fn)
        k[(1,)](*make_args())
    msg = str(info.value)
    _assert_location(msg, THIS_FILE, _line_of(fn, snippet), snippet)
    _assert_no_internal_paths(msg)


def test_compilation_error_inside_helper_points_at_helper_line():
    """A shape error in an inlined @kernel helper is reported at the helper's line."""
    helper = kernel(_bad_helper)
    g = dict(bad_helper_caller_kernel.__globals__, _bad_helper=helper)
    caller = types.FunctionType(bad_helper_caller_kernel.__code__, g, bad_helper_caller_kernel.__name__)
    with pytest.raises(CompilationError) as info:
        kernel(caller)[(1,)](torch.zeros(16, dtype=torch.int32))
    msg = str(info.value)
    _assert_location(msg, THIS_FILE, _line_of(_bad_helper, "return x + y"), "return x + y")
    _assert_no_internal_paths(msg)


def test_compilation_error_is_a_tilejit_error():
    assert issubclass(CompilationError, Exception)
    assert compiler.CompilationError is CompilationError


# --------------------------------------------------------------------------------------------
# launch-argument errors
# --------------------------------------------------------------------------------------------
@kernel
def copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


@pytest.mark.compile
def test_copy_kernel_runs():
    """The kernel below the argument errors is fine when launched correctly."""
    x = torch.arange(20, dtype=torch.float32)
    y = torch.zeros(20)
    copy_kernel[(2,)](x, y, 20, BLOCK=16)
    assert torch.equal(x, y)


def _src_dst(dtype=torch.float32):
    return torch.zeros(16, dtype=dtype), torch.zeros(16, dtype=dtype)


BAD_LAUNCHES = {
    # id: (launch, names that the message must contain besides the kernel's)
    "missing_runtime_arg": (lambda: copy_kernel[(1,)](*_src_dst(), BLOCK=16), ["n_elements"]),
    "missing_constexpr": (lambda: copy_kernel[(1,)](*_src_dst(), 16), ["BLOCK"]),
    "too_many_args": (lambda: copy_kernel[(1,)](*_src_dst(), 16, 16, 3), []),
    "unknown_keyword": (lambda: copy_kernel[(1,)](*_src_dst(), 16, BLOCK=16, BLOK=16), ["BLOK"]),
    "complex128_tensor": (lambda: copy_kernel[(1,)](torch.zeros(16, dtype=torch.complex128), torch.zeros(16), 16,
                                                    BLOCK=16), ["src_ptr"]),
    "complex64_tensor": (lambda: copy_kernel[(1,)](torch.zeros(16), torch.zeros(16, dtype=torch.complex64),
                                                   16, BLOCK=16), ["dst_ptr"]),
    "wrong_device": (lambda: copy_kernel[(1,)](torch.zeros(16), torch.zeros(16, device="meta"), 16, BLOCK=16),
                     ["dst_ptr"]),
}


@pytest.mark.parametrize("case", list(BAD_LAUNCHES))
def test_kernel_argument_error(case):
    launch, names = BAD_LAUNCHES[case]
    with pytest.raises(KernelArgumentError) as info:
        launch()
    err = info.value
    assert isinstance(err, (TypeError, ValueError))
    msg = str(err)
    assert "copy_kernel" in msg, f"kernel name not in message:\n{msg}"
    for name in names:
        assert re.search(rf"\b{name}\b", msg), f"argument {name!r} not in message:\n{msg}"
    _assert_no_internal_paths(msg)


def test_kernel_argument_error_is_exported():
    assert compiler.KernelArgumentError is KernelArgumentError
    assert issubclass(KernelArgumentError, TypeError) or issubclass(KernelArgumentError, ValueError)
