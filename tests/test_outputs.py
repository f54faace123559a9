"""Library op outputs on huge pages (kernels/outputs.py): large cpu outputs carry the kernel's
huge-page advice, small ones and the off switch do not, and the results are unchanged."""
import os
import subprocess
import sys

import pytest
import torch

import kernels as K
from kernels import outputs
from kernels.outputs import HUGE_MIN_BYTES, HUGE_PAGE

pytestmark = pytest.mark.no_toolchain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _thp_mode() -> str:
    try:
        with open(outputs.THP_ENABLED) as f:
            return f.read()
    except OSError:
        return ""


ON = "[madvise]" in _thp_mode() and os.environ.get("TILEJIT_HUGE_PAGES", "1") != "0"
needs_madvise = pytest.mark.skipif(not ON, reason="the kernel does not hand out huge pages on request here, "
                                                  "or TILEJIT_HUGE_PAGES=0")


def _advised(addr: int) -> bool:
    """Whether the mapping holding `addr` carries the huge-page advice ('hg' in its VmFlags)."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return "hg" in line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


def _aligned_inside(t: torch.Tensor) -> int:
    """An address of a 2 MiB-aligned page wholly inside `t`."""
    lo = -(-t.data_ptr() // HUGE_PAGE) * HUGE_PAGE
    assert lo + HUGE_PAGE <= t.data_ptr() + t.nbytes
    return lo


def test_the_size_rule():
    cpu = torch.device("cpu")
    assert outputs.wants_huge_pages(HUGE_MIN_BYTES, cpu) == ON
    assert not outputs.wants_huge_pages(HUGE_MIN_BYTES - 1, cpu)
    assert not outputs.wants_huge_pages(1 << 30, torch.device("meta"))


@pytest.mark.compile
def test_a_maker_allocates_fresh_tensors_as_torch_empty_strided_would():
    cpu = torch.device("cpu")
    for shape, strides, dt in [((2, 3), (3, 1), torch.bfloat16), ((0, 4), (4, 1), torch.float32), ((5,), (1,), torch.int64)]:
        make = outputs.maker(torch.Size(shape), strides, dt, cpu)
        a, b = make(), make()
        ref = torch.empty_strided(shape, strides, dtype=dt)
        for t in (a, b):
            assert (t.shape, t.stride(), t.dtype, t.device, t.layout) == (ref.shape, ref.stride(), ref.dtype, ref.device, ref.layout)
            assert not t.requires_grad and not t.is_inference()
        assert a.numel() == 0 or a.data_ptr() != b.data_ptr()
    make = outputs.maker((2, 2), (2, 1), torch.float32, cpu)
    with torch.inference_mode():   # as torch's own ops there: an inference tensor
        assert make().is_inference()
    x = torch.randn(4, 64)
    with torch.inference_mode():
        for _ in range(3):   # recorded, then replayed through the op's plan
            assert K.rms_norm(x, torch.ones(64)).is_inference()
    assert not K.rms_norm(x, torch.ones(64)).is_inference()


@needs_madvise
def test_a_large_output_is_advised():
    t = outputs.new_output((1024, 1024 * 3), dtype=torch.float32, device="cpu")   # 12 MiB
    assert _advised(_aligned_inside(t))
    like = outputs.new_output_like(t)
    assert _advised(_aligned_inside(like))


@pytest.mark.compile
@needs_madvise
def test_layer_norm_output_is_advised_on_its_first_call_and_on_replays():
    x = torch.randn(1024, 2048)   # 8 MiB
    w, b = torch.randn(2048), torch.randn(2048)
    ref = torch.nn.functional.layer_norm(x, (2048,), w, b, 1e-5)
    for _ in range(3):   # recorded, then replayed (kernels/op_plans.py allocates the replays)
        y = K.layer_norm(x, w, b, 1e-5)
        assert _advised(_aligned_inside(y))
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
        assert y.untyped_storage().resizable()   # still torch's own storage


@pytest.mark.integration
@needs_madvise
def test_the_switch_turns_it_off():
    code = ("import torch; from kernels import outputs; "
            "t = outputs.new_output((4096, 1024), dtype=torch.float32, device='cpu'); "
            "print(outputs.wants_huge_pages(t.nbytes, t.device))")
    env = dict(os.environ, TILEJIT_HUGE_PAGES="0")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
