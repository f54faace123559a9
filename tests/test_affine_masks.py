"""The closed-form all-true check of masks over affine indices (targets/cfamily/masks.py and
tj_affine_cmp in the targets' headers): it decides the unmasked fast path from the tile's corners,
and an index that wraps around int32 must send it back to the element-by-element check."""
import pytest
from tiers import on_targets
import torch

from compiler import kernel, language as tl, use_target

pytestmark = pytest.mark.compile

I32 = 2 ** 31


@kernel
def window_copy(x_ptr, out_ptr, start, lo, hi, STEP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    offs = start + i * STEP
    m = (offs >= lo) & (offs < hi)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=m), mask=m)


@kernel
def lower_bound_copy(x_ptr, out_ptr, start, lo, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = start + i >= lo
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=m), mask=m)


@kernel
def grid_copy(x_ptr, out_ptr, r0, c0, R, C, skip, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = r0 + tl.arange(0, BLOCK_R)
    c = c0 - tl.arange(0, BLOCK_C)          # a negative step
    m = (r < R)[:, None] & (c >= C)[None, :] & (r != skip)[:, None]
    i = tl.arange(0, BLOCK_R)[:, None] * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=m), mask=m)


def _wrap32(t: torch.Tensor) -> torch.Tensor:
    return (t + I32) % 2 ** 32 - I32


def _expected(x, mask):
    """x where the mask holds; elsewhere the store left out's -7."""
    return torch.where(mask, x, torch.full_like(x, -7.0))


@pytest.mark.sampled
@pytest.mark.parametrize("start, lo, hi, step", [
    (0, 0, 64, 1),              # all in bounds: the fast path
    (10, 0, 40, 1),             # a tail
    (100, 0, 50, 1),            # all out
    (-5, 0, 64, 2),             # a head, step 2
    (300, 0, 200, -3),          # a negative step crossing hi
    (I32 - 10, I32 - 20, I32 - 1, 1),   # the index wraps past INT32_MAX: checked element by element
    (-I32 + 3, -I32, I32 - 1, -1),      # ... and below INT32_MIN
])
@pytest.mark.parametrize("target", on_targets("cpu", "kunlun:xpu3"))
def test_window_masks_match_torch(start, lo, hi, step, target):
    x = torch.randn(64)
    out = torch.full((64,), -7.0)
    with use_target(target):
        ck = window_copy[(1,)](x, out, start, lo, hi, STEP=step, BLOCK=64)
    offs = _wrap32(start + torch.arange(64, dtype=torch.int64) * step)
    torch.testing.assert_close(out, _expected(x, (offs >= lo) & (offs < hi)), rtol=0, atol=0)
    # the cpu store loops over the box where the mask holds (tj_span), kunlun checks its corners
    assert ("tj_span<int32_t>" if target == "cpu" else "tj_affine_cmp<int32_t>") in ck.source


def test_a_wrapped_index_is_not_taken_as_all_true():
    """start + i >= start holds at every i only while no element wraps: from INT32_MAX - 9 on, the
    elements past the tenth wrap to negative and fail it (a corner-only check would say all true)."""
    x, out = torch.randn(64), torch.full((64,), -7.0)
    lower_bound_copy[(1,)](x, out, I32 - 10, I32 - 10, BLOCK=64)
    want = torch.arange(64) < 10
    torch.testing.assert_close(out, _expected(x, want), rtol=0, atol=0)


@pytest.mark.parametrize("r0, c0, R, C, skip", [(0, 31, 8, 0, -1), (4, 40, 10, 20, 6), (0, 31, 8, 0, 3),
                                                (I32 - 4, 5, I32 - 1, -100, 0)])
def test_two_dimensional_masks_with_a_uniform_term(r0, c0, R, C, skip):
    x, out = torch.randn(8 * 32), torch.full((8 * 32,), -7.0)
    ck = grid_copy[(1,)](x, out, r0, c0, R, C, skip, BLOCK_R=8, BLOCK_C=32)
    r = _wrap32(r0 + torch.arange(8, dtype=torch.int64))
    c = _wrap32(c0 - torch.arange(32, dtype=torch.int64))
    m = (r < R)[:, None] & (c >= C)[None, :] & (r != skip)[:, None]
    torch.testing.assert_close(out, _expected(x, m.reshape(-1)), rtol=0, atol=0)
    assert ck.source.count("tj_affine_cmp<int32_t>") == 3


@kernel
def box_scaled(x_ptr, out_ptr, r0, c0, R, C, on, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = r0 + tl.arange(0, BLOCK_R)
    c = c0 - tl.arange(0, BLOCK_C)
    m = (r < R)[:, None] & (c >= C)[None, :] & (on > 0)
    i = tl.arange(0, BLOCK_R)[:, None] * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    tl.store(out_ptr + i, (tl.load(x_ptr + i, mask=m) * 3.0).to(out_ptr.dtype.element_ty), mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("r0, c0, R, C, on", [(0, 63, 8, 0, 1), (3, 63, 8, 0, 1), (0, 63, 8, 17, 1), (0, 63, 8, 31, 1),
                                              (5, 20, 7, -100, 1), (0, 63, 8, 0, 0), (9, 63, 8, 0, 1),
                                              (I32 - 4, 63, I32 - 1, 0, 1)])
def test_a_store_loops_over_the_box_where_its_mask_holds(r0, c0, R, C, on, dtype):
    """Rows below R and columns (counted down from c0) at or above C, and a uniform switch: the cpu
    store runs the rows and columns inside alone, unmasked (a bf16 row's last chunk as long as the
    box leaves it), and touches nothing outside; rows that wrap past INT32_MAX take the masked loop."""
    x = torch.randn(8 * 64).to(dtype)
    out = torch.full((8 * 64,), -7.0).to(dtype)
    ck = box_scaled[(1,)](x, out, r0, c0, R, C, on, BLOCK_R=8, BLOCK_C=64)
    r = _wrap32(r0 + torch.arange(8, dtype=torch.int64))
    c = c0 - torch.arange(64, dtype=torch.int64)
    m = ((r < R)[:, None] & (c >= C)[None, :] & (on > 0)).reshape(-1)
    torch.testing.assert_close(out, _expected((x.float() * 3.0).to(dtype), m), rtol=0, atol=0)
    assert "tj_span<int32_t>" in ck.source and "tj_affine_cmp" not in ck.source


@kernel
def gathered_mask_copy(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    j = tl.load(idx_ptr + i)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=j < n), mask=j < n)


def test_a_mask_over_loaded_values_is_checked_element_by_element():
    x, out = torch.randn(16), torch.full((16,), -7.0)
    idx = torch.tensor([0, 5, 2, 9] * 4, dtype=torch.int32)
    ck = gathered_mask_copy[(1,)](x, idx, out, 6, BLOCK=16)
    torch.testing.assert_close(out, _expected(x, idx < 6), rtol=0, atol=0)
    assert "tj_affine_cmp" not in ck.source
