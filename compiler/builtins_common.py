"""Argument checks shared by the builtin handlers (builtins_impl.py and its companions), and the
type objects of Triton's `x.type` / `p.dtype` that they accept as dtypes."""
from __future__ import annotations

import dataclasses

from . import dtypes as D
from .semantic import SemanticError, Tile


def _const_int(name, what, v) -> int:
    if isinstance(v, Tile) or not isinstance(v, int) or isinstance(v, bool):
        raise SemanticError(f"tl.{name}: {what} must be a constexpr int, got "
                            f"{'a run-time value' if isinstance(v, Tile) else repr(v)} "
                            "(declare it as a `tl.constexpr` parameter)")
    return v


def _shape(name, shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise SemanticError(f"tl.{name}: shape must be a tuple of constexpr ints, got {shape!r}")
    out = tuple(_const_int(name, "every shape entry", s) for s in shape)
    if any(s <= 0 for s in out):
        raise SemanticError(f"tl.{name}: shape entries must be positive, got {list(out)}")
    return out


@dataclasses.dataclass(frozen=True)
class BlockType:
    """What `x.type` is for a tile, as in Triton: its element type and shape. Where a dtype is
    expected (`x.to(t)`, `tl.cast`) it stands for its element type, as in Triton's cast."""

    element_ty: D.dtype
    shape: tuple

    @property
    def scalar(self):
        return self.element_ty


@dataclasses.dataclass(frozen=True)
class BlockPointerType:
    """What `p.dtype` (and `p.type`) is for a block pointer, as in Triton: a pointer to a block,
    whose `element_ty` is the block type (`x.to(p.dtype.element_ty)` casts to the element type)."""

    element_ty: BlockType


def _dtype(name, dt) -> D.dtype:
    if isinstance(dt, BlockType):
        dt = dt.element_ty
    if not isinstance(dt, D.dtype):
        raise SemanticError(f"tl.{name}: expected a dtype such as tl.float32, got {dt!r}")
    return dt
