"""What each tile-language builtin does at compile time: argument checking against the
builtin's documented signature, constexpr folding, then IR construction through the Builder."""
from __future__ import annotations

import inspect

from . import dtypes as D
from . import language as lang
from .semantic import SemanticError, Tile

_UNARY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sigmoid", "sin", "cos", "floor", "ceil")


def _bind(name, args, kwargs) -> dict:
    target = lang.BUILTINS[name].__wrapped__ if name in lang.BUILTINS else None
    sig = inspect.signature(target)
    try:
        b = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise SemanticError(f"tl.{name}: {e}") from None
    b.apply_defaults()
    return b.arguments


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


def _dtype(name, dt) -> D.dtype:
    if not isinstance(dt, D.dtype):
        raise SemanticError(f"tl.{name}: expected a dtype such as tl.float32, got {dt!r}")
    return dt


def call_builtin(visitor, node, name: str, args: list, kwargs: dict):
    b = visitor.builder
    if name == "_to":
        tile, *rest = args
        dt = rest[0] if rest else kwargs.get("dtype")
        if kwargs.get("bitcast"):
            raise SemanticError("bitcast is not supported")
        return b.cast(b.to_tile(tile), _dtype("to", dt))
    a = _bind(name, args, kwargs)
    if name in ("program_id", "num_programs"):
        axis = _const_int(name, "axis", a["axis"])
        if axis not in (0, 1, 2):
            raise SemanticError(f"tl.{name}: axis must be 0, 1 or 2, got {axis}")
        return b.op1(name, [], {"axis": axis})
    if name == "arange":
        start = _const_int(name, "start", a["start"])
        end = _const_int(name, "end", a["end"])
        if end <= start:
            raise SemanticError(f"tl.arange: end ({end}) must be greater than start ({start})")
        return b.op1("arange", [], {"start": start, "end": end})
    if name == "zeros":
        return b.const(0, _dtype(name, a["dtype"]), _shape(name, a["shape"]))
    if name == "full":
        dt = _dtype(name, a["dtype"])
        shape = _shape(name, a["shape"])
        v = a["value"]
        if isinstance(v, Tile):
            return b.broadcast_to(b.cast(v, dt), shape)
        return b.const(v, dt, shape)
    if name == "load":
        return b.load(a["pointer"], a["mask"], a["other"])
    if name == "store":
        return b.store(a["pointer"], a["value"], a["mask"])
    if name == "dot":
        if a["out_dtype"] is not D.float32 and not isinstance(a["out_dtype"], D.dtype):
            raise SemanticError("tl.dot: out_dtype must be a dtype")
        return b.dot(a["input"], a["other"], a["acc"], a["out_dtype"])
    if name == "sum":
        out = a["dtype"]
        return b.reduce("sum", a["input"], a["axis"], a["keep_dims"], out)
    if name in ("max", "min"):
        if a["return_indices"]:
            raise SemanticError(f"tl.{name}: return_indices is not supported")
        return b.reduce(name, a["input"], a["axis"], a["keep_dims"])
    if name in _UNARY:
        x = a["x"]
        if not isinstance(x, Tile):
            x = b.to_tile(float(x)) if name != "abs" else b.to_tile(x)
        return b.unary(name, x)
    if name == "where":
        return b.where(a["condition"], a["x"], a["y"])
    if name in ("maximum", "minimum"):
        return b.binary("max" if name == "maximum" else "min", a["x"], a["y"])
    if name == "fma":
        return b.fma(a["x"], a["y"], a["z"])
    if name == "cdiv":
        x, d = a["x"], a["div"]
        if not isinstance(x, Tile) and not isinstance(d, Tile):
            return -(-x // d)
        return b.binary("floordiv", b.binary("sub", b.binary("add", x, d), 1), d)
    if name == "broadcast_to":
        shape = a["shape"]
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return b.broadcast_to(b.to_tile(a["input"]), _shape(name, shape))
    if name == "expand_dims":
        axes = a["axis"] if isinstance(a["axis"], (tuple, list)) else (a["axis"],)
        t = b.to_tile(a["input"])
        for ax in axes:
            t = b.expand_dims(t, _const_int(name, "axis", ax))
        return t
    if name == "trans":
        t = b.to_tile(a["input"])
        dims = a["dims"]
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = dims[0]
        perm = list(dims) if dims else list(reversed(range(len(t.shape))))
        return b.op1("trans", [t], {"perm": perm})
    if name in ("multiple_of", "max_contiguous", "max_constancy"):
        return a["input"]
    if name == "static_assert":
        if isinstance(a["cond"], Tile):
            raise SemanticError("tl.static_assert needs a constexpr condition")
        if not a["cond"]:
            raise SemanticError(f"static_assert failed: {a['msg']}")
        return None
    if name == "static_print":
        print(*a["values"])
        return None
    raise SemanticError(f"tl.{name} is not implemented")
