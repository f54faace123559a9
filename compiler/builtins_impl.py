"""What each tile-language builtin does at compile time: argument checking against the
builtin's documented signature, constexpr folding, then IR construction through the Builder."""
from __future__ import annotations

import inspect

from . import dtypes as D
from . import language as lang
from .ir.ops import MATH
from .builtins_common import _const_int, _dtype, _shape
from .builtins_combine import HANDLERS as _COMBINE_HANDLERS
from .builtins_combine import reduce_with
from .builtins_memory import HANDLERS as _MEMORY_HANDLERS
from .builtins_random import HANDLERS as _RANDOM_HANDLERS
from .builtins_tiles import HANDLERS as _TILE_HANDLERS
from .builtins_tiles import convert, minmax
from .semantic import SemanticError, Tile


def _bind(name, args, kwargs) -> dict:
    target = lang.BUILTINS[name].__wrapped__ if name in lang.BUILTINS else None
    sig = inspect.signature(target)
    try:
        b = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise SemanticError(f"tl.{name}: {e}") from None
    b.apply_defaults()
    return b.arguments


def _to_signature(dtype, fp_downcast_rounding=None, bitcast=False):
    """x.to(dtype, fp_downcast_rounding=None, bitcast=False)"""


def _to(b, name, args, kwargs):
    tile, *rest = args
    try:
        a = inspect.signature(_to_signature).bind(*rest, **kwargs).arguments
    except TypeError as e:
        raise SemanticError(f"x.to(): {e}") from None
    return convert(b, tile, a["dtype"], bool(a.get("bitcast")), "to")


def _program_id(b, name, a):
    axis = _const_int(name, "axis", a["axis"])
    if axis not in (0, 1, 2):
        raise SemanticError(f"tl.{name}: axis must be 0, 1 or 2, got {axis}")
    return b.op1(name, [], {"axis": axis})


def _arange(b, name, a):
    start = _const_int(name, "start", a["start"])
    end = _const_int(name, "end", a["end"])
    if end <= start:
        raise SemanticError(f"tl.arange: end ({end}) must be greater than start ({start})")
    if not (-(2 ** 31) <= start and end <= 2 ** 31):
        raise SemanticError(f"tl.arange({start}, {end}): its values are int32, so start and end must lie in "
                            "[-2**31, 2**31]; use smaller BLOCK sizes")
    return b.op1("arange", [], {"start": start, "end": end})


def _full(b, name, a):
    dt = _dtype(name, a["dtype"])
    shape = _shape(name, a["shape"])
    v = a["value"]
    if isinstance(v, Tile):
        return b.broadcast_to(b.cast(v, dt), shape)
    return b.const(v, dt, shape)


def _dot(b, name, a):
    if a["out_dtype"] is not D.float32 and not isinstance(a["out_dtype"], D.dtype):
        raise SemanticError("tl.dot: out_dtype must be a dtype")
    return b.dot(a["input"], a["other"], a["acc"], a["out_dtype"])


def _math(b, name, a):
    x = a["x"]
    if not isinstance(x, Tile):
        x = b.to_tile(float(x)) if name != "abs" else b.to_tile(x)
    return b.unary(name, x)


def _cdiv(b, name, a):
    x, d = a["x"], a["div"]
    if not isinstance(x, Tile) and not isinstance(d, Tile):
        return -(-x // d)
    return b.binary("floordiv", b.binary("sub", b.binary("add", x, d), 1), d)


def _broadcast_to(b, name, a):
    shape = a["shape"]
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return b.broadcast_to(b.to_tile(a["input"]), _shape(name, shape))


def _expand_dims(b, name, a):
    """Triton's rule: each axis is a position in the result (rank + len(axes) dims), negative ones
    counted from its end; inserted in ascending order."""
    axes = a["axis"] if isinstance(a["axis"], (tuple, list)) else (a["axis"],)
    t = b.to_tile(a["input"])
    rank = len(t.shape) + len(axes)
    norm = []
    for ax in axes:
        ax = _const_int(name, "axis", ax)
        if not -rank <= ax < rank:
            raise SemanticError(f"tl.expand_dims: invalid axis {ax}: the result has {rank} dimensions")
        norm.append(ax % rank)
    if len(set(norm)) != len(norm):
        raise SemanticError(f"tl.expand_dims: duplicate axes, normalized axes = {sorted(norm)}")
    for ax in sorted(norm):
        t = b.expand_dims(t, ax)
    return t


def _trans(b, name, a):
    t = b.to_tile(a["input"])
    dims = a["dims"]
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    perm = list(dims) if dims else list(reversed(range(len(t.shape))))
    return b.op1("trans", [t], {"perm": perm})


def _static_assert(b, name, a):
    if isinstance(a["cond"], Tile):
        raise SemanticError("tl.static_assert needs a constexpr condition")
    if not a["cond"]:
        raise SemanticError(f"static_assert failed: {a['msg']}")


def _static_print(b, name, a):
    print(*a["values"])


# builtin name -> handler(builder, name, bound arguments); one entry per tl builtin
_HANDLERS = {
    "program_id": _program_id, "num_programs": _program_id, "arange": _arange,
    "zeros": lambda b, n, a: b.const(0, _dtype(n, a["dtype"]), _shape(n, a["shape"])),
    "full": _full,
    "load": lambda b, n, a: b.load(a["pointer"], a["mask"], a["other"]),
    "store": lambda b, n, a: b.store(a["pointer"], a["value"], a["mask"]),
    "dot": _dot,
    "sum": lambda b, n, a: b.reduce("sum", a["input"], a["axis"], a["keep_dims"], a["dtype"]),
    **{m: _math for m in MATH},
    "where": lambda b, n, a: b.where(a["condition"], a["x"], a["y"]),
    "maximum": lambda b, n, a: minmax(b, "max", a["x"], a["y"], a["propagate_nan"]),
    "minimum": lambda b, n, a: minmax(b, "min", a["x"], a["y"], a["propagate_nan"]),
    "fma": lambda b, n, a: b.fma(a["x"], a["y"], a["z"]),
    "cdiv": _cdiv, "broadcast_to": _broadcast_to, "expand_dims": _expand_dims, "trans": _trans,
    "multiple_of": lambda b, n, a: a["input"], "max_contiguous": lambda b, n, a: a["input"],
    "max_constancy": lambda b, n, a: a["input"],
    "static_assert": _static_assert, "static_print": _static_print,
}


_HANDLERS.update(_TILE_HANDLERS)
_HANDLERS.update(_COMBINE_HANDLERS)
_HANDLERS.update(_RANDOM_HANDLERS)
_HANDLERS.update(_MEMORY_HANDLERS)


def call_builtin(visitor, node, name: str, args: list, kwargs: dict):
    """Runs builtin `name` at compile time: binds the arguments to its documented signature, then
    folds constexprs or builds IR through the visitor's builder."""
    b = visitor.builder
    if name == "_to":
        return _to(b, name, args, kwargs)
    if name == "reduce":   # inlines the combine function: needs the visitor
        a = _bind(name, args, kwargs)
        return reduce_with(visitor, node, a["input"], a["axis"], a["combine_fn"], a["keep_dims"])
    handler = _HANDLERS.get(name)
    if handler is None:
        raise SemanticError(f"tl.{name} is not implemented")
    return handler(b, name, _bind(name, args, kwargs))
