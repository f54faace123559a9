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


def _axis(name, axis, rank, extra=0) -> int:
    """A constexpr axis of a `rank`-D tile (of the result's rank + extra for inserted axes),
    negative ones counted from the end."""
    axis = _const_int(name, "axis", axis)
    if not -(rank + extra) <= axis < rank + extra:
        raise SemanticError(f"tl.{name}: invalid axis {axis} for a {rank}-D tile")
    return axis % (rank + extra)


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
    if dt in D.UNSUPPORTED_FP8:
        raise SemanticError(f"tl.{name}: {dt.triton_name} is not supported in a kernel; the fp8 formats here are "
                            "tl.float8e5 and tl.float8e4nv (torch float8_e5m2 / float8_e4m3fn)")
    return dt


def python_function(obj):
    """The plain function behind a @kernel object or a Triton JITFunction; None otherwise."""
    if getattr(type(obj), "is_tilejit_kernel", False):
        return obj.fn
    mod = type(obj).__module__ or ""
    if mod.startswith("triton") and hasattr(obj, "fn") and callable(obj.fn):
        return obj.fn
    return None
