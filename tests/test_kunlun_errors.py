"""A Kunlun kernel that reads or writes outside its tensors, under host emulation: the error names
the kernel, the source line of the access, the argument and the elements it touched against the
tensor's extent, with the mask hint (as the cpu target's bounds check does)."""
from __future__ import annotations

import re

import pytest
import torch

import compiler
from compiler import kernel, language as tl
from compiler.errors import KernelBoundsError
from targets.kunlun.runtime.launcher import KunlunLaunchError

pytestmark = pytest.mark.emulation


@kernel
def _unmasked_load(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # no mask: the last program reads past the end of x
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x + y, mask=offs < n)


@kernel
def _unmasked_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # no mask on the store
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0)


def test_an_access_outside_a_tensor_names_kernel_line_argument_and_range():
    x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    with compiler.use_target("kunlun:xpu3"), pytest.raises(KunlunLaunchError) as e:
        _unmasked_load[(4,)](x, y, out, 1000, BLOCK=256)
    msg = str(e.value)
    assert isinstance(e.value, KernelBoundsError)   # the same family as the cpu target's bounds check
    assert msg.startswith("kernel '_unmasked_load' on kunlun:xpu3 (host emulation): load from argument 'x_ptr' at "
                          f"{__file__}:{_unmasked_load.fn.__code__.co_firstlineno + 4} "
                          "(`x = tl.load(x_ptr + offs)`) touches elements [768, 1024) of it, outside its extent "
                          "[0, 1000)"), msg
    assert "Mask the access (e.g. mask=offs < n)" in msg and "GM2LM" in msg

    x2, out2 = torch.randn(100), torch.empty(100)
    with compiler.use_target("kunlun:xpu3"), pytest.raises(KernelBoundsError) as e:
        _unmasked_store[(1,)](x2, out2, 100, BLOCK=128)
    msg = str(e.value)
    assert re.search(r"store to argument 'out_ptr' at \S+:\d+ \(`tl.store\(out_ptr \+ offs, .*`\) touches elements "
                     r"\[0, 128\) of it, outside its extent \[0, 100\)", msg), msg

    # the next launch starts clean: in bounds, it runs
    x3, out3 = torch.randn(128), torch.empty(128)
    with compiler.use_target("kunlun:xpu3"):
        _unmasked_store[(1,)](x3, out3, 128, BLOCK=128)
    torch.testing.assert_close(out3, x3 * 2.0)
