"""Builtin handlers for memory beyond plain load/store: block pointers (tl.make_block_ptr /
tl.advance, loads and stores with boundary_check / padding_option) and device-side tensor
descriptors (tl.make_tensor_descriptor, desc.load / desc.store), both expanded into pointer
tiles and masks; atomics (one IR op each, returning the old values); tl.debug_barrier,
tl.device_print and tl.device_assert."""
from __future__ import annotations

from . import dtypes as D
from .builtins_common import BlockPointerType, BlockType, _const_int
from .semantic import SemanticError, Tile


def _scalars(name, what, vals, rank=None):
    if isinstance(vals, (Tile, int)):
        vals = (vals,)
    vals = tuple(vals)
    if rank is not None and len(vals) != rank:
        raise SemanticError(f"{name}: {what} needs {rank} entries (one per axis), got {len(vals)}")
    for v in vals:
        if isinstance(v, Tile) and (v.shape or not v.dtype.is_int()) or not isinstance(v, (Tile, int)):
            raise SemanticError(f"{name}: every entry of {what} must be an integer scalar, got {v!r}")
    return vals


class BlockPointer:
    """What tl.make_block_ptr returns: compile-time structure over run-time scalars."""

    def __init__(self, base, shape, strides, offsets, block_shape, order):
        self.base, self.shape, self.strides, self.offsets = base, tuple(shape), tuple(strides), tuple(offsets)
        self.block_shape, self.order = tuple(block_shape), tuple(order)

    def tj_flatten(self):
        r = len(self.block_shape)
        leaves = [self.base, *self.shape, *self.strides, *self.offsets, (self.block_shape, self.order)]

        def rebuild(ls):
            return type(self)(ls[0], ls[1:1 + r], ls[1 + r:1 + 2 * r], ls[1 + 2 * r:1 + 3 * r], *ls[-1])
        return leaves, rebuild

    def tj_attr(self, attr):
        if attr == "advance":
            return _Method(lambda b, offsets: advance(b, self, offsets))
        if attr in ("dtype", "type"):
            return BlockPointerType(BlockType(self.base.dtype.element_ty, self.block_shape))
        raise SemanticError(f"a block pointer has no attribute '{attr}' (it has .dtype and .type; use tl.load / "
                            "tl.store / tl.advance)")

    def pointers(self, b, check) -> tuple[Tile, Tile | None]:
        """(pointer tile of block_shape, mask of the axes in `check`, or None)."""
        rank = len(self.block_shape)
        ptr = b.to_tile(self.base)
        mask = None
        for k, n in enumerate(self.block_shape):
            idx = b.binary("add", b.op1("arange", [], {"start": 0, "end": n}), self.offsets[k])
            for ax in range(rank):
                if ax != k:
                    idx = b.expand_dims(idx, ax)
            ptr = b.binary("add", ptr, b.binary("mul", idx, self.strides[k]))
            if k in check:
                inside = b.binary("and", b.binary("ge", idx, 0), b.binary("lt", idx, self.shape[k]))
                mask = inside if mask is None else b.binary("and", mask, inside)
        return b.broadcast_to(ptr, self.block_shape), None if mask is None else b.broadcast_to(mask, self.block_shape)


class _Method:
    """A bound method of an aggregate (called by the frontend with the builder first)."""

    __tilejit_method__ = True

    def __init__(self, fn):
        self.fn = fn


def make_block_ptr(b, name, a):
    base = b.to_tile(a["base"])
    if not base.dtype.is_ptr() or base.shape:
        raise SemanticError(f"tl.make_block_ptr: base must be a pointer scalar, got {base.type}")
    block = tuple(_const_int(name, "block_shape", s) for s in a["block_shape"])
    rank = len(block)
    order = tuple(a["order"])
    return BlockPointer(base, _scalars(name, "shape", a["shape"], rank), _scalars(name, "strides", a["strides"], rank),
                        _scalars(name, "offsets", a["offsets"], rank), block, order)


def advance(b, bp, offsets):
    if not isinstance(bp, BlockPointer):
        raise SemanticError("tl.advance needs a block pointer (from tl.make_block_ptr)")
    delta = _scalars("tl.advance", "offsets", offsets, len(bp.block_shape))
    new = [o + d if not isinstance(o, Tile) and not isinstance(d, Tile) else b.binary("add", o, d)
           for o, d in zip(bp.offsets, delta)]
    return BlockPointer(bp.base, bp.shape, bp.strides, new, bp.block_shape, bp.order)


def _check_axes(bp, boundary_check):
    axes = tuple(boundary_check or ())
    for ax in axes:
        if not isinstance(ax, int) or not 0 <= ax < len(bp.block_shape):
            raise SemanticError(f"boundary_check entries must be axes of the block, got {ax!r}")
    return axes


def _padding(elem, padding_option):
    if padding_option in ("", None, "zero"):
        return 0
    if padding_option == "nan":
        if not elem.is_floating():
            raise SemanticError("padding_option='nan' needs a floating-point tensor")
        return float("nan")
    raise SemanticError(f"padding_option must be 'zero' or 'nan', got {padding_option!r}")


def load(b, name, a):
    p = a["pointer"]
    if isinstance(p, BlockPointer):
        if a["mask"] is not None or a["other"] is not None:
            raise SemanticError("tl.load of a block pointer takes boundary_check/padding_option, not mask/other")
        ptr, mask = p.pointers(b, _check_axes(p, a["boundary_check"]))
        other = _padding(ptr.dtype.element_ty, a["padding_option"]) if mask is not None else None
        return b.load(ptr, mask, other)
    if a["boundary_check"] or a["padding_option"]:
        raise SemanticError("boundary_check / padding_option apply to block pointers (tl.make_block_ptr) only")
    return b.load(p, a["mask"], a["other"])


def store(b, name, a):
    p = a["pointer"]
    if isinstance(p, BlockPointer):
        if a["mask"] is not None:
            raise SemanticError("tl.store through a block pointer takes boundary_check, not mask")
        ptr, mask = p.pointers(b, _check_axes(p, a["boundary_check"]))
        return b.store(ptr, a["value"], mask)
    if a["boundary_check"]:
        raise SemanticError("boundary_check applies to block pointers (tl.make_block_ptr) only")
    return b.store(p, a["value"], a["mask"])


class TensorDescriptor:
    """What tl.make_tensor_descriptor returns: blocks of `block_shape` at run-time offsets, checked
    against the tensor's shape on every axis (zero outside on load, skipped on store)."""

    def __init__(self, base, shape, strides, block_shape, padding="zero"):
        self.base, self.shape, self.strides = base, tuple(shape), tuple(strides)
        self.block_shape, self.padding = tuple(block_shape), padding

    def tj_flatten(self):
        r = len(self.block_shape)
        leaves = [self.base, *self.shape, *self.strides, (self.block_shape, self.padding)]
        return leaves, lambda ls: type(self)(ls[0], ls[1:1 + r], ls[1 + r:1 + 2 * r], *ls[-1])

    def _block(self, offsets):
        r = len(self.block_shape)
        return BlockPointer(self.base, self.shape, self.strides, _scalars("desc", "offsets", offsets, r),
                            self.block_shape, tuple(reversed(range(r))))

    def load(self, b, offsets):
        ptr, mask = self._block(offsets).pointers(b, tuple(range(len(self.block_shape))))
        return b.load(ptr, mask, _padding(ptr.dtype.element_ty, self.padding))

    def store(self, b, offsets, value):
        ptr, mask = self._block(offsets).pointers(b, tuple(range(len(self.block_shape))))
        b.store(ptr, value, mask)

    def tj_attr(self, attr):
        if attr == "load":
            return _Method(lambda b, offsets: self.load(b, offsets))
        if attr == "store":
            return _Method(lambda b, offsets, value: self.store(b, offsets, value))
        if attr == "block_shape":
            return self.block_shape
        if attr == "dtype":
            return self.base.dtype.element_ty
        raise SemanticError(f"a tensor descriptor has no attribute '{attr}' (load, store, block_shape, dtype)")


def make_tensor_descriptor(b, name, a):
    base = b.to_tile(a["base"])
    if not base.dtype.is_ptr() or base.shape:
        raise SemanticError(f"tl.make_tensor_descriptor: base must be a pointer scalar, got {base.type}")
    block = tuple(_const_int(name, "block_shape", s) for s in a["block_shape"])
    rank = len(block)
    _padding(base.dtype.element_ty, a["padding_option"])
    return TensorDescriptor(base, _scalars(name, "shape", a["shape"], rank),
                            _scalars(name, "strides", a["strides"], rank), block, a["padding_option"])


def _desc(d):
    if not isinstance(d, TensorDescriptor):
        raise SemanticError("expected a tensor descriptor (from tl.make_tensor_descriptor)")
    return d


def atomic(b, name, a):
    kind = name[len("atomic_"):]
    ptr = b.to_tile(a["pointer"])
    if not ptr.dtype.is_ptr():
        raise SemanticError(f"tl.{name} needs a pointer, got {ptr.dtype}")
    elem = ptr.dtype.element_ty
    if elem.is_bool() or elem in D.FP8:
        raise SemanticError(f"tl.{name} on {elem} values is not supported")
    if kind in ("and", "or", "xor") and not elem.is_int():
        raise SemanticError(f"tl.{name} needs an integer tensor, got {elem}")
    if kind == "cas":
        parts = [ptr, b.cast(b.to_tile(a["cmp"], elem), elem), b.cast(b.to_tile(a["val"], elem), elem)]
        return b.op1("atomic_cas", b.broadcast_all(*parts))
    parts = [ptr, b.cast(b.to_tile(a["val"], elem), elem)]
    if a["mask"] is not None:
        m = b.to_tile(a["mask"])
        parts.append(m if m.dtype is D.int1 else b.binary("ne", m, 0))
    return b.op1("atomic_rmw", b.broadcast_all(*parts), {"kind": kind})


def device_print(b, name, a):
    prefix = a["prefix"]
    if not isinstance(prefix, str):
        raise SemanticError("tl.device_print: the prefix must be a string")
    args = [b.to_tile(v) for v in a["args"]]
    b.op("print", args, {"prefix": prefix, "hex": bool(a["hex"])})


def device_assert(b, name, a):
    cond = b.to_tile(a["cond"])
    if cond.dtype is not D.int1:
        cond = b.binary("ne", cond, 0)
    if a["mask"] is not None:
        m = b.to_tile(a["mask"])
        cond = b.binary("or", cond, b.unary("not", m if m.dtype is D.int1 else b.binary("ne", m, 0)))
    b.op("assert", [cond], {"msg": str(a["msg"])})


def _barrier(b):
    b.op("barrier", [])


HANDLERS = {
    "make_block_ptr": make_block_ptr, "advance": lambda b, n, a: advance(b, a["base"], a["offsets"]),
    "load": load, "store": store, "make_tensor_descriptor": make_tensor_descriptor,
    "load_tensor_descriptor": lambda b, n, a: _desc(a["desc"]).load(b, a["offsets"]),
    "store_tensor_descriptor": lambda b, n, a: _desc(a["desc"]).store(b, a["offsets"], a["value"]),
    **{f"atomic_{k}": atomic for k in ("add", "max", "min", "xchg", "and", "or", "xor", "cas")},
    "debug_barrier": lambda b, n, a: _barrier(b),
    "device_print": device_print, "device_assert": device_assert,
    "assume": lambda b, n, a: None,
}
