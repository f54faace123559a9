"""Builtin handlers for conversions, shape changes, scans, arg-reductions and integer and float
math beyond the unary table: cast/bitcast, pow, umulhi, reshape/view/ravel, join/split/
interleave, cumsum, argmax/argmin and max/min with indices, clamp, zeros_like/full_like, and the
libdevice predicates (isnan, isinf, signbit, copysign, ...) built from exact operations."""
from __future__ import annotations

from . import dtypes as D
from . import language as lang
from .builtins_common import _axis, _dtype, _shape
from .semantic import SemanticError, Tile


def convert(b, x, dt, bitcast: bool = False, what: str = "to"):
    """`x.to(dt)` / `tl.cast(x, dt, bitcast=...)`."""
    dt = _dtype(what, dt)
    x = b.to_tile(x)
    return b.bitcast(x, dt) if bitcast else b.cast(x, dt)


def _cast(b, name, a):
    return convert(b, a["input"], a["dtype"], bool(a["bitcast"]), "cast")


def _float_pair(b, x, y):
    x, y = b._promote_pair(x, y)
    dt = b.compute_dtype(D.promote(x.dtype, y.dtype))
    if not dt.is_floating():
        dt = D.float32
    return b.broadcast_all(b.cast(x, dt), b.cast(y, dt))


def _pow(b, name, a):
    return b.op1("pow", _float_pair(b, a["x"], a["y"]))


def _fdiv(b, name, a):
    return b.op1("div", _float_pair(b, a["x"], a["y"]))


def _fmod(b, name, a):
    return b.op1("mod", _float_pair(b, a["x"], a["y"]))


def _umulhi(b, name, a):
    x, y = b._promote_pair(a["x"], a["y"])
    x, y = b.broadcast_all(x, y)
    dt = D.promote(x.dtype, y.dtype)
    if dt in (D.int64, D.uint64):
        return umulhi64(b, b.cast(x, dt), b.cast(y, dt), dt)
    if dt not in (D.int32, D.uint32):
        raise SemanticError(f"tl.umulhi needs 32- or 64-bit integer operands, got {x.dtype} and {y.dtype}")
    return b.op1("umulhi", [b.cast(x, dt), b.cast(y, dt)])


def umulhi64(b, x: Tile, y: Tile, dt) -> Tile:
    """The high 64 bits of the 128-bit product of two 64-bit integers read as unsigned, from their
    32-bit halves in int64 arithmetic (wrapping; shifts masked to act as logical ones), so targets
    without uint64 (kunlun) compute it too."""
    x, y = b.bitcast(b.to_tile(x), D.int64) if x.dtype.bits == 64 else x, \
        b.bitcast(b.to_tile(y), D.int64) if y.dtype.bits == 64 else y
    mask = 0xFFFFFFFF

    def lo(v):
        return b.binary("and", v, mask)

    def hi(v):
        return b.binary("and", b.binary("shr", v, 32), mask)

    xl, xh, yl, yh = lo(x), hi(x), lo(y), hi(y)
    ll, lh, hl, hh = (b.binary("mul", p, q) for p, q in ((xl, yl), (xl, yh), (xh, yl), (xh, yh)))
    mid = b.binary("add", b.binary("add", hi(ll), lo(lh)), lo(hl))
    r = b.binary("add", b.binary("add", b.binary("add", hh, hi(lh)), hi(hl)), hi(mid))
    return b.bitcast(r, dt)


def _shape_args(name, shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return _shape(name, shape)


def reshape(b, x, shape):
    x = b.to_tile(x)
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if not x.shape:
        x = b.expand_dims(x, 0)
    return b.op1("reshape", [x], {"shape": shape})


def _reshape(b, name, a):
    return reshape(b, a["input"], _shape_args(name, a["shape"]))


def _ravel(b, name, a):
    x = b.to_tile(a["x"])
    return reshape(b, x, (x.type.numel,))


def _join(b, name, a):
    x, y = b._promote_pair(a["a"], a["b"])
    dt = D.promote(x.dtype, y.dtype) if not x.dtype.is_ptr() else x.dtype
    x, y = b.broadcast_all(b.cast(x, dt), b.cast(y, dt))
    return b.op1("join", [x, y])


def _split(b, name, a):
    x = b.to_tile(a["a"])
    lo, hi = b.op("split", [x])
    return lo, hi


def _interleave(b, name, a):
    j = _join(b, "join", a)
    if len(j.shape) < 2:   # two scalars: the pair itself
        return j
    return reshape(b, j, j.shape[:-2] + (2 * j.shape[-2],))


def _cumsum(b, name, a):
    x = b.to_tile(a["input"])
    if not x.shape:
        return x
    axis = _axis(name, a["axis"], len(x.shape))
    if a["dtype"] is not None:
        x = b.cast(x, _dtype(name, a["dtype"]))
    elif x.dtype.is_int() and x.dtype.bits < 32:
        x = b.cast(x, D.int32)
    out_dt = b.compute_dtype(x.dtype)
    acc_dt = D.float32 if out_dt in (D.float16, D.bfloat16) else out_dt
    r = b.op1("scan", [b.cast(x, acc_dt)], {"axis": axis, "kind": "sum", "reverse": bool(a["reverse"])})
    return b.cast(r, out_dt)


def arg_reduce(b, name, kind, x, axis, keep_dims):
    """(values, int32 indices) of the max/min along `axis` (None: over the flattened tile)."""
    x = b.to_tile(x)
    if not x.shape:
        return x, b.to_tile(0)
    if axis is None:
        x = reshape(b, x, (x.type.numel,))
        axis = 0
    axis = _axis(name, axis, len(x.shape))
    if x.dtype.is_bool():
        x = b.cast(x, D.int32)
    x = b.cast(x, b.compute_dtype(x.dtype))
    vals, idx = b.op("argreduce", [x], {"axis": axis, "kind": kind})
    if keep_dims:
        vals, idx = b.expand_dims(vals, axis), b.expand_dims(idx, axis)
    return vals, idx


def _argmax(b, name, a):
    return arg_reduce(b, name, "max" if name == "argmax" else "min", a["input"], a["axis"], a["keep_dims"])[1]


def _min_max(b, name, a):
    if a["return_indices"]:
        return arg_reduce(b, name, name, a["input"], a["axis"], a["keep_dims"])
    return b.reduce(name, a["input"], a["axis"], a["keep_dims"])


def minmax(b, kind, x, y, propagate_nan=None):
    """Elementwise max/min: the IR's op ignores a NaN operand; PropagateNan.ALL selects the NaN
    operand first (compiler/value_rules.py)."""
    try:
        nan_all = lang.propagates_nan(propagate_nan)
    except ValueError as e:
        raise SemanticError(str(e)) from None
    x, y = b._promote_pair(x, y)
    r = b.binary(kind, x, y)
    if nan_all and r.dtype.is_floating():
        x, y = b.cast(x, r.dtype), b.cast(y, r.dtype)
        r = b.where(b.binary("ne", y, y), y, r)
        r = b.where(b.binary("ne", x, x), x, r)
    return r


def _clamp(b, name, a):
    nan = a["propagate_nan"]
    return minmax(b, "min", minmax(b, "max", a["x"], a["min"], nan), a["max"], nan)


def _zeros_like(b, name, a):
    x = b.to_tile(a["input"])
    return b.const(0, x.dtype, x.shape)


def _full_like(b, name, a):
    x = b.to_tile(a["input"])
    dt = _dtype(name, a["dtype"]) if a["dtype"] is not None else x.dtype
    v = a["value"]
    if isinstance(v, Tile):
        return b.broadcast_to(b.cast(v, dt), x.shape)
    return b.const(v, dt, x.shape)


def _float_bits(b, x):
    x = b.to_tile(x)
    x = b.cast(x, b.compute_dtype(x.dtype))
    if not x.dtype.is_floating():
        x = b.cast(x, D.float32)
    if x.dtype is not D.float32:
        x = b.cast(x, D.float32)   # exact: every predicate below reads the same from fp32
    return x, b.bitcast(x, D.int32)


def _isnan(b, name, a):
    x, _ = _float_bits(b, a["x"])
    return b.binary("ne", x, x)


def _isinf(b, name, a):
    x, _ = _float_bits(b, a["x"])
    return b.binary("eq", b.unary("abs", x), float("inf"))


def _isfinite(b, name, a):
    x, _ = _float_bits(b, a["x"])
    return b.binary("lt", b.unary("abs", x), float("inf"))


def _signbit(b, name, a):
    _, bits = _float_bits(b, a["x"])
    return b.binary("lt", bits, 0)


def _copysign(b, name, a):
    x = b.to_tile(a["x"])
    dt = b.compute_dtype(x.dtype) if x.dtype.is_floating() else D.float32
    _, xb = _float_bits(b, x)
    _, yb = _float_bits(b, a["y"])
    xb, yb = b.broadcast_all(xb, yb)
    bits = b.binary("or", b.binary("and", xb, 0x7FFFFFFF), b.binary("and", yb, -(2 ** 31)))
    return b.cast(b.bitcast(bits, D.float32), dt)


def _llrint(b, name, a):
    x = b.to_tile(a["x"])
    x = b.cast(x, b.compute_dtype(x.dtype))
    return b.cast(b.unary("rint", x), D.int64)


HANDLERS = {
    "cast": _cast, "pow": _pow, "fdiv": _fdiv, "_fmod": _fmod, "umulhi": _umulhi,
    "reshape": _reshape, "view": _reshape, "ravel": _ravel, "join": _join, "split": _split,
    "interleave": _interleave, "cumsum": _cumsum, "argmax": _argmax, "argmin": _argmax,
    "max": _min_max, "min": _min_max, "clamp": _clamp, "zeros_like": _zeros_like, "full_like": _full_like,
    "_isnan": _isnan, "_isinf": _isinf, "_isfinite": _isfinite, "_signbit": _signbit, "_copysign": _copysign,
    "_llrint": _llrint,
}
